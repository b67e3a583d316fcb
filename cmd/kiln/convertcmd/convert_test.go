package convertcmd

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/kiln-build/kiln/cmd/kiln/internal/cmdutil"
	"github.com/kiln-build/kiln/internal/testimage"
	"github.com/kiln-build/kiln/layers"
)

// TestConvertCommandEStargz: kiln convert --format estargz of a registry
// tag writes TAG-estargz, the listed startup file first in its layer.
func TestConvertCommandEStargz(t *testing.T) {
	reg := testimage.Registry(t)
	src := reg + "/conv/app:v1"
	testimage.Push(t, src, testimage.Image(t, testimage.Config{},
		testimage.Layer(t, []testimage.Entry{testimage.File("app/a.py", []byte("a")), testimage.File("app/z.py", []byte("z"))}, "gzip")))
	list := filepath.Join(t.TempDir(), "startup.txt")
	if err := os.WriteFile(list, []byte("/app/z.py\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, stdout, errOut := run(t, "convert", src, "--format", "estargz", "--startup-list", list, "--json", "--progress", "none")
	if code != cmdutil.ExitOK {
		t.Fatalf("exit %d\n%s", code, errOut)
	}
	var rep struct {
		To     string `json:"to"`
		Format string `json:"format"`
		Layers []struct {
			StartupFiles int `json:"startup_files"`
		} `json:"layers"`
	}
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatal(err)
	}
	if rep.To != src+"-estargz" || rep.Format != "estargz" || len(rep.Layers) != 1 || rep.Layers[0].StartupFiles != 1 {
		t.Fatalf("report %+v", rep)
	}
	got, err := layers.Open(context.Background(), rep.To)
	if err != nil {
		t.Fatal(err)
	}
	defer got.Close()
	var names []string
	if _, err := got.Layers[0].Walk(context.Background(), layers.WalkOptions{}, func(e *layers.Entry, _ io.Reader) error {
		names = append(names, e.Header.Name)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(names) != 4 || names[0] != "app/z.py" || names[1] != ".prefetch.landmark" || names[2] != "app/a.py" || names[3] != "stargz.index.json" {
		t.Errorf("entries %v: want app/z.py, the landmark, app/a.py, the TOC", names)
	}
	if code, _, _ := run(t, "convert", src, "--format", "estargz", "--startup-list", filepath.Join(t.TempDir(), "none"), "--progress", "none"); code != cmdutil.ExitUsage {
		t.Errorf("missing --startup-list file: exit %d", code)
	}
}
