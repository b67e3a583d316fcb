package layers_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kiln-build/kiln/internal/testimage"
	"github.com/kiln-build/kiln/layers"
)

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
		err = layers.CheckTarget(ctx, "--to", ref)
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
	if err := layers.CheckTarget(ctx, "--to", ref); err != nil {
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
	if err := layers.CheckTarget(ctx, "--to", ref); err == nil || !strings.Contains(err.Error(), "refused a push") || !strings.Contains(err.Error(), "docker login "+host) {
		t.Errorf("refused: %v", err)
	}
	ref, _ = layers.ParseRef("127.0.0.1:1/kiln/app:slim")
	if err := layers.CheckTarget(ctx, "--to", ref); err == nil || !strings.Contains(err.Error(), "--to 127.0.0.1:1/kiln/app:slim: cannot reach") {
		t.Errorf("unreachable: %v", err)
	}
}
