// Package testdockerd starts a real Docker engine (Debian's docker.io
// dockerd) for one test, with its own data root, exec root and socket, so
// tests of the docker target talk to the real API.
package testdockerd

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Engine is a running dockerd.
type Engine struct {
	Socket string
	Root   string
	client *http.Client
}

// Start starts dockerd, or skips when it cannot run here (not root, no
// binary) unless KILN_REQUIRE_DOCKER=1.
func Start(t testing.TB) *Engine {
	t.Helper()
	skip := func(why string) {
		if os.Getenv("KILN_REQUIRE_DOCKER") == "1" {
			t.Fatalf("KILN_REQUIRE_DOCKER=1 but %s", why)
		}
		t.Skip(why)
	}
	if os.Geteuid() != 0 {
		skip("dockerd tests need root")
	}
	bin, err := exec.LookPath("dockerd")
	if err != nil {
		skip("no dockerd binary")
	}
	// Unix socket paths are limited to 108 bytes; TempDir paths can be
	// longer, so the socket and exec root live in a short /tmp directory.
	short, err := os.MkdirTemp("/tmp", "kdk")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	e := &Engine{Socket: filepath.Join(short, "d.sock"), Root: filepath.Join(dir, "data")}
	logf, err := os.Create(filepath.Join(dir, "dockerd.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--data-root", e.Root, "-H", "unix://"+e.Socket, "--iptables=false", "--bridge=none",
		"--exec-root", filepath.Join(short, "exec"), "--pidfile", filepath.Join(short, "pid"))
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		skip("dockerd does not start: " + err.Error())
	}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			cmd.Process.Kill()
			<-done
		}
		logf.Close()
		unmountUnder(e.Root)
		unmountUnder(short)
		os.RemoveAll(short)
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			s := string(b)
			if len(s) > 3000 {
				s = s[len(s)-3000:]
			}
			t.Logf("dockerd log (tail):\n%s", s)
		}
	})
	e.client = &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", e.Socket)
	}}}
	deadline := time.Now().Add(60 * time.Second)
	for {
		if resp, err := e.client.Get("http://docker/_ping"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return e
			}
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(logf.Name())
			t.Fatalf("dockerd did not answer on %s:\n%s", e.Socket, b)
		}
		time.Sleep(200 * time.Millisecond)
	}
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
func (e *Engine) Inspect(t testing.TB, name string) (Image, bool) {
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
func (e *Engine) Images(t testing.TB) []string {
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

func unmountUnder(root string) {
	f, err := os.Open("/proc/self/mounts")
	if err != nil {
		return
	}
	defer f.Close()
	var mps []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var dev, mp string
		fmt.Sscan(sc.Text(), &dev, &mp)
		if strings.HasPrefix(mp, root+"/") {
			mps = append(mps, mp)
		}
	}
	for i := len(mps) - 1; i >= 0; i-- {
		syscall.Unmount(mps[i], syscall.MNT_DETACH)
	}
}
