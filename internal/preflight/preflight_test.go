package preflight

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kiln-build/kiln/internal/testimage"
	"github.com/kiln-build/kiln/layers"
)

func TestDisk(t *testing.T) {
	dir := t.TempDir()
	free, err := Free(dir)
	if err != nil || free <= 0 {
		t.Fatalf("Free: %d %v", free, err)
	}
	// A directory not made yet is measured where it would be made.
	if err := Disk(filepath.Join(dir, "not", "yet"), 1, "scratch"); err != nil {
		t.Errorf("1 byte: %v", err)
	}
	err = Disk(dir, free+1<<40, "the slimmed layers")
	if !errors.Is(err, ErrNoSpace) || !strings.Contains(err.Error(), "the slimmed layers needs about") {
		t.Errorf("more than free: %v", err)
	}
}

func TestTargetLocal(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "f")
	os.WriteFile(file, []byte("x"), 0o644)
	ctx := context.Background()
	for _, tc := range []struct{ ref, want string }{
		{"oci:" + filepath.Join(dir, "new", "layout"), ""},
		{"docker-archive:" + filepath.Join(dir, "a.tar"), ""},
		{"oci:" + filepath.Join(file, "sub"), "is a file, not a directory"},
		{"docker-archive:" + dir, "is a directory; a docker archive is a file"},
	} {
		ref, err := layers.ParseRef(tc.ref)
		if err != nil {
			t.Fatal(err)
		}
		err = Target(ctx, "--to", ref)
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%s: %v, want %q", tc.ref, err, tc.want)
		}
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("the checks left files behind: %v", ents)
	}
}

func TestTargetRegistry(t *testing.T) {
	ctx := context.Background()
	reg := testimage.Registry(t)
	ref, err := layers.ParseRef(reg + "/kiln/app:slim")
	if err != nil {
		t.Fatal(err)
	}
	if err := Target(ctx, "--to", ref); err != nil {
		t.Errorf("a registry that takes pushes: %v", err)
	}
	// A registry that refuses the push says so and names docker login.
	deny := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v2/" {
			w.WriteHeader(http.StatusOK)
			return
		}
		w.WriteHeader(http.StatusForbidden)
	}))
	defer deny.Close()
	host := strings.TrimPrefix(deny.URL, "http://")
	ref, _ = layers.ParseRef(host + "/kiln/app:slim")
	if err := Target(ctx, "--to", ref); err == nil || !strings.Contains(err.Error(), "refused a push") || !strings.Contains(err.Error(), "docker login "+host) {
		t.Errorf("refused: %v", err)
	}
	ref, _ = layers.ParseRef("127.0.0.1:1/kiln/app:slim")
	if err := Target(ctx, "--to", ref); err == nil || !strings.Contains(err.Error(), "--to 127.0.0.1:1/kiln/app:slim: cannot reach") {
		t.Errorf("unreachable: %v", err)
	}
}
