//go:build integration

package integration

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/kiln-build/kiln/internal/testdaemon"
	"github.com/kiln-build/kiln/layers"
)

// TestEStargzLazyPull lays the suite's runtime-strict slim of the
// realistic CUDA app fixture (strictSlim: its probe imports torch and
// loads libtorch_cuda and NCCL, the startup set recorded with
// --startup-list) out as eStargz with `kiln convert --format estargz
// --startup-list` (slim once, for kiln warm and for lazy pulls), then
// starts it on containerd 2.x with the real stargz snapshotter
// (containerd-stargz-grpc at the version go.mod pins, a proxy plugin) and
// runs the import in it.
//
// The snapshotter fetches the registry's blobs through a counting proxy
// and with background fetching off, so what it fetched is exactly what
// the start needed (the TOCs, the prefetched startup region, the chunks
// read on demand). The proof that the image started before its full
// fetch: `ctr images pull` stores no layer blob, the container's import
// succeeds, and the bytes fetched by then are fewer than the layers'.
// How much faster that is goes in bench/coldstart.sh, not here.
// (`kiln slim --format estargz` itself is TestSlimCommandEStargz's, on a
// small image.)
func TestEStargzLazyPull(t *testing.T) {
	testdaemon.PruneAfter(t, true)
	// Cheap prerequisites before the slow slim (when this test makes it).
	testdaemon.StargzBin(t)
	// The stargz snapshotter is served to the 2.x transfer service.
	t.Setenv("KILN_CONTAINERD_BIN", testdaemon.Containerd2Bin(t, testdaemon.RequireEnv("KILN_REQUIRE_STARGZ")))
	r := newSlimRun(t, "kiln-esgz-it-")
	layout, digest, slimOut, list := r.strictSlim(t)
	dest := registry() + "/kiln-esgz-it/app:esgz"
	b, err := os.ReadFile(list)
	if err != nil {
		t.Fatal(err)
	}
	startup := strings.Fields(string(b))
	var slimRep struct {
		StartupFiles int `json:"startup_files"`
	}
	if err := json.Unmarshal(slimOut, &slimRep); err != nil || len(startup) != slimRep.StartupFiles {
		t.Fatalf("startup set: %d files listed, the slim's report says %d recorded (%v)", len(startup), slimRep.StartupFiles, err)
	}
	// What the probe must have opened: the interpreter, torch's package
	// and the CUDA library it loaded by name.
	for _, want := range []string{"/torch/__init__.py", "/libtorch_cuda.so"} {
		if !slices.ContainsFunc(startup, func(p string) bool { return strings.Contains(p, want) }) {
			t.Errorf("no %s in the startup set", want)
		}
	}
	if !slices.ContainsFunc(startup, func(p string) bool { return strings.HasPrefix(path.Base(p), "python3") }) {
		t.Error("no python3 in the startup set")
	}

	cv := run(t, nil, r.bin, "convert", layout+"@"+digest, "--format", "estargz", "--startup-list", list,
		"--to", dest, "--work-dir", r.scratch, "--json", "--progress", "none")
	if cv.code != 0 {
		t.Fatalf("kiln convert --format estargz: exit %d\n%s", cv.code, cv.err)
	}
	var rep struct {
		Digest string `json:"digest"`
		Format string `json:"format"`
		Layers []struct {
			StartupFiles int `json:"startup_files"`
		} `json:"layers"`
	}
	if err := json.Unmarshal([]byte(cv.out), &rep); err != nil {
		t.Fatalf("report: %v\n%s", err, cv.out)
	}
	inImage := 0
	for _, l := range rep.Layers {
		inImage += l.StartupFiles
	}
	if rep.Format != "estargz" || inImage < 100 || inImage > len(startup) {
		t.Fatalf("convert: format %q, %d of the %d startup files placed first", rep.Format, inImage, len(startup))
	}

	ref := strings.Split(dest, ":esgz")[0] + "@" + rep.Digest
	pref, _ := name.ParseReference(ref)
	img, err := remote.Image(pref)
	if err != nil {
		t.Fatal(err)
	}
	m, _ := img.Manifest()
	var total int64
	var layerDigests []string
	for _, l := range m.Layers {
		if l.Annotations[layers.AnnotationTOCDigest] == "" {
			t.Fatalf("layer %s has no TOC digest annotation", l.Digest)
		}
		total += l.Size
		layerDigests = append(layerDigests, l.Digest.String())
	}

	proxy := newCountingProxy(t, registry())
	sz := testdaemon.StartStargz(t, registry(), proxy.host, true, testdaemon.RequireEnv("KILN_REQUIRE_STARGZ"))
	cd := testdaemon.StartContainerd(t, testdaemon.ExtraConfig(sz.ContainerdConfig()), testdaemon.RequireEnv("KILN_REQUIRE_STARGZ"))
	if cd.Major < 2 {
		t.Fatalf("containerd %s is 1.x: the transfer service's remote snapshotter support needs 2.1+", cd.Bin)
	}
	if out, err := cd.Ctr(t, "images", "pull", "--plain-http", "--snapshotter", "stargz", ref); err != nil {
		t.Fatalf("ctr images pull --snapshotter stargz: %v\n%s", err, out)
	}
	content, _ := cd.Ctr(t, "content", "ls", "-q")
	for _, d := range layerDigests {
		if strings.Contains(content, d) {
			t.Errorf("layer %s was fetched into the content store: not a lazy pull", d)
		}
	}
	ran, err := cd.RunOutput(t, "stargz", ref, "kiln-esgz-it", nil,
		"python3", "-c", `import torch, ctypes; ctypes.CDLL("libtorch_cuda.so.2.6"); print("torch", torch.__version__)`)
	if err != nil || !strings.Contains(ran, "torch ") {
		t.Fatalf("ctr run under the stargz snapshotter: %v\n%s", err, ran)
	}
	fetched := proxy.total(layerDigests)
	t.Logf("torch imported under the stargz snapshotter with %d of %d layer bytes fetched (%.1f%%), %d startup files",
		fetched, total, 100*float64(fetched)/float64(total), inImage)
	if fetched == 0 || fetched >= total {
		t.Fatalf("fetched %d of %d layer bytes by the time the probe succeeded: want some, and fewer than all", fetched, total)
	}
}

// countingProxy is a reverse proxy in front of a plain-HTTP registry that
// counts the blob bytes its clients read, per digest.
type countingProxy struct {
	host string
	mu   sync.Mutex
	n    map[string]int64
}

func newCountingProxy(t *testing.T, registry string) *countingProxy {
	t.Helper()
	u, _ := url.Parse("http://" + registry)
	p := &countingProxy{n: map[string]int64{}}
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.ModifyResponse = func(resp *http.Response) error {
		if i := strings.Index(resp.Request.URL.Path, "/blobs/"); i >= 0 {
			resp.Body = &countBody{ReadCloser: resp.Body, p: p, digest: resp.Request.URL.Path[i+len("/blobs/"):]}
		}
		return nil
	}
	srv := httptest.NewServer(rp)
	t.Cleanup(srv.Close)
	p.host = strings.TrimPrefix(srv.URL, "http://")
	return p
}

func (p *countingProxy) total(digests []string) int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	var n int64
	for _, d := range digests {
		n += p.n[d]
	}
	return n
}

func (p *countingProxy) String() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return fmt.Sprint(p.n)
}

type countBody struct {
	io.ReadCloser
	p      *countingProxy
	digest string
}

func (b *countBody) Read(q []byte) (int, error) {
	n, err := b.ReadCloser.Read(q)
	b.p.mu.Lock()
	b.p.n[b.digest] += int64(n)
	b.p.mu.Unlock()
	return n, err
}
