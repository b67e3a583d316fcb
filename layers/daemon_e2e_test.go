package layers_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kiln-build/kiln/internal/testkit"

	"github.com/kiln-build/kiln/internal/testdaemon"
	"github.com/kiln-build/kiln/internal/testimage"
	"github.com/kiln-build/kiln/layers"
)

// fakeDaemon serves the two calls of the Docker Engine API that
// docker-daemon: makes (_ping, images/get) on a unix socket, from a docker
// archive on disk, and points DOCKER_HOST at it.
func fakeDaemon(t *testing.T, names map[string]string) *[]string {
	return fakeDaemonSized(t, names, 0)
}

// fakeDaemonSized is fakeDaemon that also answers image inspects with
// size (none when 0).
func fakeDaemonSized(t *testing.T, names map[string]string, size int64) *[]string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "docker.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	var asked []string
	mux := http.NewServeMux()
	mux.HandleFunc("/_ping", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("API-Version", "1.47")
		w.Write([]byte("OK"))
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if size > 0 && strings.HasSuffix(r.URL.Path, "/json") && strings.Contains(r.URL.Path, "/images/") {
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"Id":"sha256:%064d","Size":%d}`, 0, size)
			return
		}
		if !strings.HasSuffix(r.URL.Path, "/images/get") {
			http.NotFound(w, r)
			return
		}
		n := r.URL.Query().Get("names")
		asked = append(asked, n)
		file, ok := names[n]
		if !ok {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusNotFound)
			w.Write([]byte(`{"message":"reference does not exist"}`))
			return
		}
		w.Header().Set("Content-Type", "application/x-tar")
		http.ServeFile(w, r, file)
	})
	srv := &http.Server{Handler: mux}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	t.Setenv("DOCKER_HOST", "unix://"+sock)
	return &asked
}

// docker-daemon:NAME (dive's default source) reads an image from the local
// Docker daemon: a short name asked for in full, the layers read from the
// saved stream (verified like an archive's), nothing left behind on Close.
func TestOpenDockerDaemon(t *testing.T) {
	dir := t.TempDir()
	img := testimage.Image(t, testimage.Config{}, testimage.Layer(t, []testimage.Entry{testimage.Sized("app/model.bin", 4096)}, "gzip"))
	archive := filepath.Join(dir, "app.tar")
	testimage.WriteArchive(t, archive, "kiln/app:1", img)
	asked := fakeDaemon(t, map[string]string{"docker.io/kiln/app:1": archive})
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)

	li, err := testkit.OpenImage(context.Background(), "docker-daemon:kiln/app:1")
	if err != nil {
		t.Fatal(err)
	}
	want, _ := img.ConfigName()
	if li.Digest != want || len(li.Layers) != 1 || li.Ref.Kind != layers.KindDaemon {
		t.Errorf("image %s with %d layers (%s), want config %s, 1 layer", li.Digest, len(li.Layers), li.Ref.Kind, want)
	}
	if _, err := li.Layers[0].Walk(context.Background(), layers.WalkOptions{}, func(*layers.Entry, io.Reader) error { return nil }); err != nil {
		t.Errorf("walk: %v", err)
	}
	if err := li.Close(); err != nil {
		t.Errorf("close: %v", err)
	}
	if left, _ := os.ReadDir(tmp); len(left) != 0 {
		t.Errorf("left behind in TMPDIR: %v", left)
	}
	if len(*asked) != 1 || (*asked)[0] != "docker.io/kiln/app:1" {
		t.Errorf("the daemon was asked for %q", *asked)
	}

	_, err = testkit.OpenImage(context.Background(), "docker-daemon:kiln/nope:1")
	if err == nil || !strings.Contains(err.Error(), "has no image docker.io/kiln/nope:1") || !strings.Contains(err.Error(), "docker images") {
		t.Errorf("missing image: %v", err)
	}
	if left, _ := os.ReadDir(tmp); len(left) != 0 {
		t.Errorf("left behind in TMPDIR after a failure: %v", left)
	}

	t.Setenv("DOCKER_HOST", "unix://"+filepath.Join(dir, "no.sock"))
	_, err = testkit.OpenImage(context.Background(), "docker-daemon:kiln/app:1")
	if err == nil || !strings.Contains(err.Error(), "cannot reach the Docker daemon") {
		t.Errorf("no daemon: %v", err)
	}
}

// The same against a real dockerd (started by the test, as warm's tests
// start theirs): an image docker load put there is read by its short name,
// with its own digest.
func TestOpenDockerDaemonReal(t *testing.T) {
	dk := testdaemon.StartDockerd(t)
	dir := t.TempDir()
	img := testimage.Image(t, testimage.Config{}, testimage.Layer(t, []testimage.Entry{testimage.Sized("app/model.bin", 4096)}, "gzip"))
	archive := filepath.Join(dir, "app.tar")
	testimage.WriteArchive(t, archive, "kiln/daemon:1", img)
	if out, err := exec.Command("docker", "-H", "unix://"+dk.Socket, "load", "-i", archive).CombinedOutput(); err != nil {
		t.Fatalf("docker load: %v\n%s", err, out)
	}
	t.Setenv("DOCKER_HOST", "unix://"+dk.Socket)
	li, err := testkit.OpenImage(context.Background(), "docker-daemon:kiln/daemon:1")
	if err != nil {
		t.Fatal(err)
	}
	defer li.Close()
	want, _ := img.ConfigFile()
	if len(li.Layers) != 1 || li.Config.RootFS.DiffIDs[0] != want.RootFS.DiffIDs[0] {
		t.Errorf("read %d layers, diff IDs %v, want %v", len(li.Layers), li.Config.RootFS.DiffIDs, want.RootFS.DiffIDs)
	}
	if _, err := li.Layers[0].Walk(context.Background(), layers.WalkOptions{}, func(*layers.Entry, io.Reader) error { return nil }); err != nil {
		t.Errorf("walk: %v", err)
	}
}

// docker-daemon: saves into TMPDIR only what the daemon says the image
// is: a disk that cannot hold it is refused before the save, in words,
// and a stream far past the image's size is cut and refused (it was
// written whole, with no cap).
func TestOpenDockerDaemonBounded(t *testing.T) {
	dir := t.TempDir()
	img := testimage.Image(t, testimage.Config{}, testimage.Layer(t, []testimage.Entry{testimage.Sized("app/model.bin", 1<<20)}, "none"))
	archive := filepath.Join(dir, "app.tar")
	testimage.WriteArchive(t, archive, "kiln/app:1", img)
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	fakeDaemonSized(t, map[string]string{"docker.io/kiln/app:1": archive}, 1<<60)
	if _, err := testkit.OpenImage(context.Background(), "docker-daemon:kiln/app:1"); err == nil || !strings.Contains(err.Error(), "TMPDIR") || !strings.Contains(err.Error(), "needs about") {
		t.Errorf("an image larger than the disk: %v", err)
	}
	// The daemon says 1 KiB (plus the margin, 64 MiB) and sends 1 MiB: fine;
	// it says 1 KiB and sends more than 64 MiB: refused (a test of the cap
	// itself would write 64 MiB; the margin is in the message).
	fakeDaemonSized(t, map[string]string{"docker.io/kiln/app:1": archive}, 1024)
	li, err := testkit.OpenImage(context.Background(), "docker-daemon:kiln/app:1")
	if err != nil {
		t.Fatalf("an image within its size: %v", err)
	}
	li.Close()
	if left, _ := os.ReadDir(tmp); len(left) != 0 {
		t.Errorf("left behind in TMPDIR: %v", left)
	}
}
