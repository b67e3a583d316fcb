package hostcheck

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"

	introspectionapi "github.com/containerd/containerd/api/services/introspection/v1"
	versionapi "github.com/containerd/containerd/api/services/version/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/emptypb"
)

// Engine kinds.
const (
	EngineDocker     = "docker"
	EngineContainerd = "containerd"
	EngineBuildkit   = "buildkit"
)

// defaultSockets lists the sockets to probe for an engine kind: the
// explicit ones when given, else the standard places under Root (and, on
// the live root, the environment's and the rootless ones) that exist.
func (o *GatherOptions) defaultSockets(kind string) []string {
	explicit := map[string][]string{EngineDocker: o.DockerSockets, EngineContainerd: o.ContainerdSockets, EngineBuildkit: o.BuildkitSockets}[kind]
	if explicit != nil {
		return explicit
	}
	var cands []string
	live := o.Root == "/"
	env := func(name string) {
		if v := os.Getenv(name); live && strings.HasPrefix(v, "unix://") {
			cands = append(cands, strings.TrimPrefix(v, "unix://"))
		}
	}
	switch kind {
	case EngineDocker:
		env("DOCKER_HOST")
		cands = append(cands, o.path("var/run/docker.sock"), o.path("run/docker.sock"))
		if x := os.Getenv("XDG_RUNTIME_DIR"); live && x != "" {
			cands = append(cands, filepath.Join(x, "docker.sock")) // rootless dockerd
		}
	case EngineContainerd:
		if v := os.Getenv("CONTAINERD_ADDRESS"); live && v != "" {
			cands = append(cands, strings.TrimPrefix(v, "unix://"))
		}
		cands = append(cands, o.path("run/containerd/containerd.sock"), o.path("var/run/containerd/containerd.sock"))
	case EngineBuildkit:
		env("BUILDKIT_HOST")
		cands = append(cands, o.path("run/buildkit/buildkitd.sock"))
	}
	var out, seen []string
	for _, c := range cands {
		fi, err := os.Stat(c)
		if err != nil || fi.Mode()&os.ModeSocket == 0 {
			continue
		}
		real, err := filepath.EvalSymlinks(c)
		if err != nil {
			real = c
		}
		if !slices.Contains(seen, real) {
			seen = append(seen, real)
			out = append(out, c)
		}
	}
	return out
}

func probeEngines(ctx context.Context, o *GatherOptions) []Engine {
	var out []Engine
	for _, s := range o.defaultSockets(EngineDocker) {
		out = append(out, probeDocker(ctx, o, s))
	}
	for _, s := range o.defaultSockets(EngineContainerd) {
		out = append(out, probeContainerd(ctx, o, s))
	}
	for _, s := range o.defaultSockets(EngineBuildkit) {
		e := Engine{Kind: EngineBuildkit, Socket: s, CanBuild: true}
		c, err := net.DialTimeout("unix", s, o.Timeout)
		if err != nil {
			e.Error, e.CanBuild = err.Error(), false
		} else {
			c.Close()
			e.Reachable = true
		}
		e.Rootless = strings.HasPrefix(s, "/run/user/")
		out = append(out, e)
	}
	return out
}

// unixClient is an HTTP client that talks to a unix socket.
func unixClient(sock string) *http.Client {
	return &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		},
	}}
}

// probeDocker pings dockerd (GET /_ping) and reads /info: version, OCI
// runtimes (nvidia when the toolkit registered it), rootless.
func probeDocker(ctx context.Context, o *GatherOptions, sock string) Engine {
	e := Engine{Kind: EngineDocker, Socket: sock}
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	c := unixClient(sock)
	defer c.CloseIdleConnections()
	get := func(path string) ([]byte, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://docker"+path, nil)
		if err != nil {
			return nil, err
		}
		resp, err := c.Do(req)
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
		if err != nil {
			return nil, err
		}
		if resp.StatusCode != http.StatusOK {
			return nil, fmt.Errorf("GET %s: %s", path, resp.Status)
		}
		return b, nil
	}
	b, err := get("/_ping")
	if err != nil {
		e.Error = err.Error()
		return e
	}
	if strings.TrimSpace(string(b)) != "OK" {
		e.Error = fmt.Sprintf("GET /_ping answered %q, not OK", firstLine(string(b)))
		return e
	}
	e.Reachable = true
	b, err = get("/info")
	if err != nil {
		e.Error = err.Error()
		return e
	}
	var info struct {
		ServerVersion   string                     `json:"ServerVersion"`
		Runtimes        map[string]json.RawMessage `json:"Runtimes"`
		DefaultRuntime  string                     `json:"DefaultRuntime"`
		SecurityOptions []string                   `json:"SecurityOptions"`
		DockerRootDir   string                     `json:"DockerRootDir"`
		Driver          string                     `json:"Driver"`
	}
	if err := json.Unmarshal(b, &info); err != nil {
		e.Error = "GET /info: " + err.Error()
		return e
	}
	e.Version, e.DefaultRuntime, e.Runtimes = info.ServerVersion, info.DefaultRuntime, sortedKeys(info.Runtimes)
	e.StorageDriver = info.Driver
	for _, so := range info.SecurityOptions {
		if strings.Contains(so, "name=rootless") {
			e.Rootless = true
		}
	}
	if info.DockerRootDir != "" {
		e.DataRoot = info.DockerRootDir
		if _, free, _, err := statFS(info.DockerRootDir); err == nil {
			e.DataRootFreeBytes = free
		}
	}
	// dockerd builds images itself (its /build endpoint, BuildKit since 18.09).
	e.CanBuild = true
	return e
}

// probeContainerd asks containerd's gRPC version service for its version.
func probeContainerd(ctx context.Context, o *GatherOptions, sock string) Engine {
	e := Engine{Kind: EngineContainerd, Socket: sock, Rootless: strings.HasPrefix(sock, "/run/user/")}
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		e.Error = err.Error()
		return e
	}
	defer conn.Close()
	v, err := versionapi.NewVersionClient(conn).Version(ctx, &emptypb.Empty{})
	if err != nil {
		e.Error = err.Error()
		return e
	}
	e.Reachable, e.Version = true, v.GetVersion()
	// Where the content store and the snapshotters keep their data, as
	// the running daemon resolved it (its root may not be the default).
	ps, err := introspectionapi.NewIntrospectionClient(conn).Plugins(ctx, &introspectionapi.PluginsRequest{
		Filters: []string{"type==io.containerd.content.v1", "type==io.containerd.snapshotter.v1"}})
	if err != nil {
		e.Error = "introspection: " + err.Error()
		return e
	}
	e.snapRoots = map[string]string{}
	var erofs *introspectionapi.Plugin
	for _, p := range ps.GetPlugins() {
		root := p.GetExports()["root"]
		if p.GetType() == "io.containerd.snapshotter.v1" && p.GetID() == "erofs" {
			erofs = p
		}
		if p.GetInitErr() != nil {
			continue
		}
		if p.GetType() == "io.containerd.content.v1" && root != "" {
			e.DataRoot = root
			if _, free, _, err := statFS(root); err == nil {
				e.DataRootFreeBytes = free
			}
		} else if p.GetType() == "io.containerd.snapshotter.v1" {
			e.snapRoots[p.GetID()] = root
		}
	}
	if erofs != nil {
		gatherErofs(&e, erofs.GetInitErr() == nil, erofs.GetInitErr().GetMessage(), erofs.GetExports()["root"])
	}
	return e
}
