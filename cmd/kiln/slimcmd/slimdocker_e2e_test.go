package slimcmd

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kiln-build/kiln/internal/testkit"

	"github.com/kiln-build/kiln/cmd/kiln/internal/cmdutil"
	"github.com/kiln-build/kiln/internal/testdaemon"
	"github.com/kiln-build/kiln/internal/testimage"
)

// kiln slim --to docker-archive: is loaded by a real Docker 20.10 (the
// engine Debian ships; it cannot read zstd layers): docker load succeeds
// and the engine's layers are the archive config's diff IDs. Before the
// fix, the archive held the zstd blobs and docker load failed with
// "archive/tar: invalid tar header".
func TestSlimDockerArchiveLoads(t *testing.T) {
	dk := testdaemon.StartDockerd(t)
	dir := t.TempDir()
	img := testimage.Image(t, testimage.Config{Env: []string{"PATH=/usr/bin"}},
		testimage.Layer(t, []testimage.Entry{
			testimage.Dir("usr"), testimage.Dir("usr/bin"), testimage.Sized("usr/bin/python3", 3000),
			testimage.Sized("usr/local/cuda/lib64/libcublas.so.12", 5000), testimage.Sized("usr/local/cuda/lib64/libcudnn.so.9", 5000),
		}, "gzip"),
		testimage.Layer(t, []testimage.Entry{testimage.File("app/main.py", []byte("print(1)"))}, "zstd"))
	testimage.WriteLayout(t, dir, "app", img)
	arch := filepath.Join(dir, "slim.tar")
	code, out, errOut := run(t, "slim", "oci:"+dir+":app", "--to", "docker-archive:"+arch+":kiln/slim:v1", "--max-layer-size", "6KiB", "--json", "--progress", "none")
	if code != cmdutil.ExitOK {
		t.Fatalf("slim: exit %d\n%s\n%s", code, out, errOut)
	}
	var rep struct {
		ImageID string `json:"image_id"`
		Layers  []struct{ Name string }
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil || len(rep.Layers) < 4 {
		t.Fatalf("report: %v, layers %+v", err, rep.Layers)
	}

	c := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", dk.Socket)
	}}}
	f, err := os.Open(arch)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	resp, err := c.Post("http://docker/images/load?quiet=1", "application/x-tar", f)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	// docker load answers 200 and reports a failure in its JSON stream.
	if resp.StatusCode != http.StatusOK || strings.Contains(string(body), `"error`) {
		t.Fatalf("docker load: %s\n%s", resp.Status, body)
	}
	im, ok := dk.Inspect(t, "kiln/slim:v1")
	if !ok {
		t.Fatalf("docker load answered %s but the engine has no kiln/slim:v1", body)
	}
	back, err := testkit.OpenImage(context.Background(), "docker-archive:"+arch)
	if err != nil {
		t.Fatal(err)
	}
	defer back.Close()
	var want []string
	for _, d := range back.Config.RootFS.DiffIDs {
		want = append(want, d.String())
	}
	if strings.Join(im.RootFS.Layers, " ") != strings.Join(want, " ") || im.ID != rep.ImageID {
		t.Errorf("engine: id %s layers %v; archive: id %s layers %v", im.ID, im.RootFS.Layers, rep.ImageID, want)
	}
}
