package fleet

import (
	"context"
	"fmt"
	"hash/fnv"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"sync/atomic"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/kiln-build/kiln/layers"
	"github.com/kiln-build/kiln/registry"
)

// Push mode: the host cannot reach the registry, so fleet opens a
// listener on the host's loopback through the SSH connection (a
// tcpip-forward, what `ssh -R` does) and serves the registry API there as a
// proxy to the real registry, reached from here with this machine's
// credentials. The host's own kiln warm is given the real references and
// --mirror REGISTRY=127.0.0.1:PORT: it reads everything through the tunnel
// but names its image records by the real reference, so the host ends up
// holding exactly what a pull of the real name would leave (a later pull
// or `ctr run REF` finds the image). It does what it always does: resolves,
// asks its target what it has, fetches only the missing blobs, verifying
// each digest. Credentials never go to the
// host; it only sees an anonymous loopback registry that lives as long as
// the warm.

// tunnel is one registry served on the host's loopback.
type tunnel struct {
	remoteAddr string // host:port on the host
	ln         net.Listener
	srv        *http.Server
}

// openTunnels serves each registry refs name on the host's loopback and
// returns the --mirror arguments that send the host's warm there.
func (c *Conn) openTunnels(ctx context.Context, refs []string, lopts []registry.Option, sent *atomic.Int64) ([]string, func(), error) {
	byReg := map[string]*tunnel{}
	var all []*tunnel
	closeAll := func() {
		for _, t := range all {
			t.srv.Close()
			t.ln.Close()
		}
	}
	var out []string
	for _, r := range refs {
		ref, err := layers.ParseRef(r, lopts...)
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		if ref.Kind != layers.KindRegistry {
			closeAll()
			return nil, nil, fmt.Errorf("image %q: mode push serves registry images; push a local image to a registry first", r)
		}
		reg := ref.Name.Context().Registry
		if byReg[reg.Name()] != nil {
			continue
		}
		t, err := c.serveRegistry(ctx, reg, refs, lopts, sent)
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		byReg[reg.Name()] = t
		all = append(all, t)
		out = append(out, "--mirror", mirrorArg(reg, t.remoteAddr))
	}
	return out, closeAll, nil
}

// mirrorArg is the host's --mirror value for a registry served at addr.
func mirrorArg(reg name.Registry, addr string) string {
	return reg.RegistryStr() + "=" + addr
}

// serveRegistry listens on the host's 127.0.0.1 and proxies to reg.
func (c *Conn) serveRegistry(ctx context.Context, reg name.Registry, refs []string, lopts []registry.Option, sent *atomic.Int64) (*tunnel, error) {
	var scopes []string
	for _, r := range refs {
		if ref, err := layers.ParseRef(r, lopts...); err == nil && ref.Kind == layers.KindRegistry && ref.Name.Context().Registry == reg {
			scopes = append(scopes, ref.Name.Scope(transport.PullScope))
		}
	}
	proxy, err := registryProxy(ctx, reg, scopes, lopts, sent)
	if err != nil {
		return nil, err
	}
	// A stable port per registry keeps the host's command line (and a
	// --ready-file's content) the same from one run to the next; image
	// names carry the real registry, not this port.
	ln, err := c.client.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", tunnelPort(reg.Name())))
	if err != nil {
		ln, err = c.client.Listen("tcp", "127.0.0.1:0")
	}
	if err != nil {
		return nil, fmt.Errorf("open a loopback port on the host through SSH (is AllowTcpForwarding off in its sshd_config?): %v", err)
	}
	srv := &http.Server{Handler: proxy, ErrorLog: proxy.ErrorLog}
	go func() { _ = srv.Serve(ln) }()
	return &tunnel{remoteAddr: ln.Addr().String(), ln: ln, srv: srv}, nil
}

// registryProxy is the read-only registry the host is served: every
// request goes to reg through layers' one registry transport (the
// keychain of lopts with its time-limited helpers, the idle timeout,
// redacted error bodies), so a stalled registry fails the host's request
// instead of freezing it, and an error body that echoes this machine's
// credentials reaches the host redacted. sent counts the bytes served.
func registryProxy(ctx context.Context, reg name.Registry, scopes []string, lopts []registry.Option, sent *atomic.Int64) (*httputil.ReverseProxy, error) {
	rt, err := registry.RegistryTransport(ctx, reg, scopes, lopts...)
	if err != nil {
		return nil, fmt.Errorf("registry %s (from here, for mode push): %v", reg, err)
	}
	// Redirects (blob storage behind the registry) are followed here: the
	// host could not reach their targets either. The client drops the
	// registry token on a redirect to another host.
	follow := &http.Client{Transport: rt}
	proxy := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme = reg.Scheme()
			pr.Out.URL.Host = reg.RegistryStr()
			pr.Out.Host = reg.RegistryStr()
			pr.Out.Header.Del("Authorization")
		},
		Transport: roundTripFunc(func(req *http.Request) (*http.Response, error) {
			if req.Method != http.MethodGet && req.Method != http.MethodHead {
				return &http.Response{StatusCode: http.StatusMethodNotAllowed, Status: "405 read-only", Body: http.NoBody, Header: http.Header{}, Request: req}, nil
			}
			req = req.Clone(req.Context())
			req.RequestURI = ""
			resp, err := follow.Do(req)
			if err != nil {
				return nil, err
			}
			resp.Body = &countBody{ReadCloser: resp.Body, n: sent}
			return resp, nil
		}),
	}
	// The host sees a failed request as a 502 and reports it; the proxy's
	// own log line would only interleave with the table here.
	proxy.ErrorLog = log.New(io.Discard, "", 0)
	return proxy, nil
}

// tunnelPort is a port in 41000-48999 chosen by the registry's name.
func tunnelPort(registry string) int {
	h := fnv.New32a()
	h.Write([]byte(registry))
	return 41000 + int(h.Sum32()%8000)
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// countBody counts the bytes served to the host.
type countBody struct {
	io.ReadCloser
	n *atomic.Int64
}

func (c *countBody) Read(p []byte) (int, error) {
	n, err := c.ReadCloser.Read(p)
	c.n.Add(int64(n))
	return n, err
}
