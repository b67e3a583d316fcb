package warmcmd

import (
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/go-containerregistry/pkg/registry"

	"github.com/kiln-build/kiln/internal/testimage"
)

// Issue 27 (minor) and issue 25 item 6: a blob the registry refuses is
// named once in the error, not once per layer that wraps it.
func TestWarmFailedBlobNamedOnce(t *testing.T) {
	img := testimage.Image(t, testimage.Config{}, testimage.Layer(t, []testimage.Entry{testimage.Sized("a", 1000)}, "gzip"))
	ls, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	ld, err := ls[0].Digest()
	if err != nil {
		t.Fatal(err)
	}
	reg := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	var refuse atomic.Bool
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if refuse.Load() && r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, ld.String()) {
			w.WriteHeader(http.StatusForbidden)
			return
		}
		reg.ServeHTTP(w, r)
	}))
	defer s.Close()
	ref := strings.TrimPrefix(s.URL, "http://") + "/a/b:1"
	testimage.Push(t, ref, img)
	refuse.Store(true)
	code, _, errOut := run(t, "warm", ref, "--target", "oci:"+t.TempDir(), "--progress", "none")
	if code == 0 {
		t.Fatal("exit 0 with a refused layer")
	}
	if n := strings.Count(errOut, ld.String()); n != 1 || !strings.Contains(errOut, "403 Forbidden") {
		t.Errorf("the refused blob is named %d times (want once, with the registry's answer):\n%s", n, errOut)
	}
}

// Issue 25 item 6: a tag the registry does not have reads as words with
// the repository's tags, said once, not as a Go map.
func TestWarmUnknownTagInWords(t *testing.T) {
	host := testimage.Registry(t)
	testimage.Push(t, host+"/kiln/app:v1", testimage.Image(t, testimage.Config{},
		testimage.Layer(t, []testimage.Entry{testimage.Sized("a", 10)}, "gzip")))
	for _, json := range []bool{false, true} {
		args := []string{"warm", host + "/kiln/app:nope", "--target", "oci:" + t.TempDir(), "--progress", "none"}
		if json {
			args = append(args, "--json")
		}
		code, _, errOut := run(t, args...)
		want := `kiln: tag "nope" not found in ` + host + "/kiln/app (tags: v1)\n"
		if code == 0 || !strings.HasSuffix(errOut, want) || strings.Contains(errOut, "map[") {
			t.Errorf("json %v: exit %d, want the error %q:\n%s", json, code, want, errOut)
		}
	}
}
