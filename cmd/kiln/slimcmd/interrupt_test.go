package slimcmd

import (
	"bytes"
	"context"
	"crypto/rand"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/registry"

	"github.com/kiln-build/kiln/cmd/kiln/internal/cmdtest"
	"github.com/kiln-build/kiln/cmd/kiln/internal/cmdutil"
	"github.com/kiln-build/kiln/internal/testimage"
)

// A slim interrupted mid-rewrite (SIGINT/SIGTERM cancel the context) stops
// and leaves no scratch: the temporary directory is gone, and so is
// --work-dir's image/. The registry stalls in the middle of the second
// layer's body until the run is cancelled; the first layer's rewrite has
// written scratch by then.
func TestSlimInterruptedLeavesNoScratch(t *testing.T) {
	stalled := make(chan struct{}, 4)
	var stallDigest string
	reg := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && stallDigest != "" && strings.HasSuffix(r.URL.Path, "/blobs/"+stallDigest) {
			rec := httptest.NewRecorder()
			reg.ServeHTTP(rec, r)
			body := rec.Body.Bytes()
			for k, v := range rec.Header() {
				w.Header()[k] = v
			}
			w.WriteHeader(rec.Code)
			w.Write(body[:len(body)/2])
			w.(http.Flusher).Flush()
			stalled <- struct{}{}
			<-r.Context().Done()
			return
		}
		reg.ServeHTTP(w, r)
	}))
	defer s.Close()
	u, _ := url.Parse(s.URL)
	img := testimage.Image(t, testimage.Config{},
		testimage.Layer(t, []testimage.Entry{testimage.File("usr/lib/liba.so", random(t, 1<<20))}, "gzip"),
		testimage.Layer(t, []testimage.Entry{testimage.File("usr/lib/libb.so", random(t, 1<<20))}, "gzip"))
	ref := u.Host + "/kiln/app:1"
	testimage.Push(t, ref, img)
	ls, _ := img.Layers()
	d, _ := ls[1].Digest()
	stallDigest = d.String()

	for _, workDir := range []bool{false, true} {
		tmp := t.TempDir()
		t.Setenv("KILN_WORK_DIR", tmp)
		args := []string{"slim", ref, "--to", "oci:" + filepath.Join(t.TempDir(), "out"), "--progress", "none", "--jobs", "1"}
		work := filepath.Join(t.TempDir(), "work")
		if workDir {
			args = append(args, "--work-dir", work)
		}
		ctx, cancel := context.WithCancel(context.Background())
		go func() {
			<-stalled
			cancel()
		}()
		var out, errOut bytes.Buffer
		f := cmdtest.Factory(&out, &errOut, cmdutil.Leaf(NewCmdSlim))
		code := f.Exec(ctx, args, f.IO)
		cancel()
		if code != cmdutil.ExitInterrupted {
			t.Fatalf("exit %d, %s; want the slim interrupted", code, errOut.String())
		}
		if ents, _ := os.ReadDir(tmp); len(ents) != 0 {
			t.Errorf("interrupted slim left scratch in KILN_WORK_DIR: %v", ents)
		}
		if _, err := os.Stat(filepath.Join(work, "image")); workDir && !os.IsNotExist(err) {
			t.Errorf("interrupted slim kept --work-dir's image/: %v", err)
		}
	}
}

// random is incompressible, so layers are as large as their files.
func random(t *testing.T, n int) []byte {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}
