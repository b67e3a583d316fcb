package selfimage

import (
	"archive/tar"
	"context"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/kiln-build/kiln/internal/testkit"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/kiln-build/kiln/layers"
)

// inputs writes a binary and a CA bundle into a fresh directory, with the
// given modification time, so two builds differ in everything but bytes.
func inputs(t *testing.T, mtime time.Time) (bin, ca string) {
	t.Helper()
	dir := t.TempDir()
	bin, ca = filepath.Join(dir, "kiln"), filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(bin, []byte("\x7fELF static kiln"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(ca, []byte("-----BEGIN CERTIFICATE-----\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{bin, ca} {
		if err := os.Chtimes(f, mtime, mtime); err != nil {
			t.Fatal(err)
		}
	}
	return bin, ca
}

// TestReproducible: two builds of the same binary and certificates, from
// different directories with different file times and modes, written to
// two OCI layouts, give one digest, for the image and for the index.
func TestReproducible(t *testing.T) {
	ctx := context.Background()
	created := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	build := func(mtime time.Time, multi bool) v1.Hash {
		bin, ca := inputs(t, mtime)
		opts := []Option{WithCACerts(ca), WithCreated(created), WithLabels(map[string]string{"org.opencontainers.image.version": "v1.2.3"})}
		amd := Binary{Platform: v1.Platform{OS: "linux", Architecture: "amd64"}, Path: bin}
		dest := "oci:" + t.TempDir() + ":v1.2.3"
		if multi {
			idx, err := Index([]Binary{amd, {Platform: v1.Platform{OS: "linux", Architecture: "arm64"}, Path: bin}}, opts...)
			if err != nil {
				t.Fatal(err)
			}
			dg, err := layers.WriteIndex(ctx, idx, testkit.Ref(t, dest))
			if err != nil {
				t.Fatal(err)
			}
			return dg
		}
		img, err := Image(amd, opts...)
		if err != nil {
			t.Fatal(err)
		}
		dg, err := layers.Write(ctx, img, testkit.Ref(t, dest))
		if err != nil {
			t.Fatal(err)
		}
		return dg
	}
	for _, multi := range []bool{false, true} {
		a, b := build(time.Unix(1, 0), multi), build(time.Now(), multi)
		if a != b {
			t.Errorf("multi=%v: two builds of the same inputs: %s and %s", multi, a, b)
		}
	}
}

// TestImageContents: the layer holds the binary (executable) and the CA
// bundle at the paths the config names, owned by root, dated as asked.
func TestImageContents(t *testing.T) {
	bin, ca := inputs(t, time.Now())
	created := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	img, err := Image(Binary{Platform: v1.Platform{OS: "linux", Architecture: "arm64"}, Path: bin}, WithCACerts(ca), WithCreated(created))
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.Architecture != "arm64" || cf.OS != "linux" || len(cf.Config.Entrypoint) != 1 || cf.Config.Entrypoint[0] != BinaryPath || !cf.Created.Time.Equal(created) {
		t.Errorf("config: %+v", cf)
	}
	ls, err := img.Layers()
	if err != nil || len(ls) != 1 {
		t.Fatalf("layers: %d, %v", len(ls), err)
	}
	rc, err := ls[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	got := map[string]*tar.Header{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Name == BinaryPath[1:] {
			b, _ := io.ReadAll(tr)
			if string(b) != "\x7fELF static kiln" {
				t.Errorf("binary: %q", b)
			}
		}
		got[h.Name] = h
	}
	for name, mode := range map[string]int64{BinaryPath[1:]: 0o755, CACertPath[1:]: 0o644, "tmp/": 0o1777} {
		h := got[name]
		if h == nil {
			t.Errorf("%s missing from the layer", name)
			continue
		}
		if h.Mode != mode || h.Uid != 0 || h.Gid != 0 || !h.ModTime.Equal(created) {
			t.Errorf("%s: mode %o uid %d gid %d mtime %v", name, h.Mode, h.Uid, h.Gid, h.ModTime)
		}
	}
}

func TestMissingInput(t *testing.T) {
	_, ca := inputs(t, time.Now())
	if _, err := Image(Binary{Path: filepath.Join(t.TempDir(), "nope")}, WithCACerts(ca)); err == nil {
		t.Error("a missing binary was accepted")
	}
	if _, err := ParseBinary("dist/kiln"); err == nil {
		t.Error("ParseBinary without PLATFORM= accepted")
	}
}
