package testdaemon

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// Dockerd is a running dockerd.
type Dockerd struct {
	Socket string // API socket
	Root   string // --data-root
	client *http.Client
}

// StartDockerd starts dockerd (no iptables, no bridge) with its own data
// root, exec root, pidfile and socket, and waits until it answers /_ping.
// Args adds flags such as --containerd, --config-file or --storage-driver.
func StartDockerd(t testing.TB, opts ...Option) *Dockerd {
	t.Helper()
	c := newConfig("KILN_REQUIRE_DOCKER", opts)
	bin := c.lookup(t, "dockerd")
	dir := t.TempDir()
	// The exec root holds the sockets of dockerd's own containerd.
	short := shortDir(t, "kdk")
	e := &Dockerd{Socket: c.socket, Root: filepath.Join(dir, "data")}
	if e.Socket == "" {
		e.Socket = filepath.Join(short, "d.sock")
	} else if err := os.MkdirAll(filepath.Dir(e.Socket), 0o755); err != nil {
		t.Fatal(err)
	}
	p := c.start(t, bin, dir, 20*time.Second, []string{e.Root},
		"--data-root", e.Root, "-H", "unix://"+e.Socket, "--iptables=false", "--bridge=none",
		"--exec-root", filepath.Join(short, "exec"), "--pidfile", filepath.Join(short, "pid"))
	e.client = &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", e.Socket)
	}}}
	p.wait(t, 60*time.Second, "answer on "+e.Socket, func() bool {
		resp, err := e.client.Get("http://docker/_ping")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
	return e
}

// Image is the part of GET /images/{name}/json tests look at.
type Image struct {
	ID       string   `json:"Id"`
	RepoTags []string `json:"RepoTags"`
	RootFS   struct {
		Layers []string `json:"Layers"`
	} `json:"RootFS"`
}

// Inspect asks the engine for an image; ok is false on 404.
func (e *Dockerd) Inspect(t testing.TB, name string) (Image, bool) {
	t.Helper()
	resp, err := e.client.Get("http://docker/images/" + name + "/json")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == 404 {
		return Image{}, false
	}
	if resp.StatusCode != 200 {
		t.Fatalf("GET /images/%s/json: %s", name, resp.Status)
	}
	var im Image
	if err := json.NewDecoder(resp.Body).Decode(&im); err != nil {
		t.Fatal(err)
	}
	return im, true
}

// Images lists the engine's image IDs.
func (e *Dockerd) Images(t testing.TB) []string {
	t.Helper()
	resp, err := e.client.Get("http://docker/images/json?all=1")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var list []struct {
		ID string `json:"Id"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, l := range list {
		ids = append(ids, l.ID)
	}
	return ids
}
