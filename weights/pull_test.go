package weights

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/kiln-build/kiln/internal/testkit"

	"github.com/google/go-containerregistry/pkg/registry"

	"github.com/kiln-build/kiln/internal/preflight"
)

// publishLayout publishes modelFiles to an OCI layout and resolves it back.
func publishLayout(t *testing.T, files []testFile) (*Resolved, string) {
	t.Helper()
	c := collect(t, files, WithLargeFileThreshold(1<<20))
	lay := filepath.Join(t.TempDir(), "layout")
	if _, _, err := c.Publish(context.Background(), testkit.Ref(t, "oci:"+lay+":w"), "", "sha256:"+strings.Repeat("3", 64)); err != nil {
		t.Fatal(err)
	}
	res, err := Resolve(context.Background(), "oci:"+lay+":w", "")
	if err != nil {
		t.Fatal(err)
	}
	return res, lay
}

// tree lists a directory: path → size, "->target" for links.
func tree(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if b := filepath.Base(rel); b == LockFile || b == LayoutMarker {
			// Bookkeeping kept across pulls: the lock, and the layout
			// marker a pull writes under it before anything else.
			return nil
		}
		switch {
		case fi.Mode()&os.ModeSymlink != 0:
			l, _ := os.Readlink(p)
			out[rel] = "->" + l
		case fi.Mode().IsRegular():
			out[rel] = fmt.Sprintf("%d %v", fi.Size(), fi.Mode().Perm())
		}
		return nil
	})
	return out
}

func TestPullLayoutRoundTripAndSha256sum(t *testing.T) {
	ctx := context.Background()
	res, _ := publishLayout(t, modelFiles)
	dir := filepath.Join(t.TempDir(), "vol")
	r, err := Pull(ctx, res.Manifest, res.Source, dir, PullOptions{Jobs: 3})
	if err != nil {
		t.Fatal(err)
	}
	if r.Present != 0 || r.Fetched == 0 {
		t.Errorf("first pull: %+v", r)
	}
	for _, f := range modelFiles {
		rel := strings.TrimPrefix(f.path, "app/models/")
		b, err := os.ReadFile(filepath.Join(dir, ModelDir, rel))
		if err != nil {
			t.Fatal(err)
		}
		if hexOf(b) != hexOf(f.data) {
			t.Errorf("%s: wrong bytes", rel)
		}
		fi, _ := os.Stat(filepath.Join(dir, ModelDir, rel))
		if fi.Mode().Perm() != os.FileMode(f.mode) {
			t.Errorf("%s: mode %v, want %#o", rel, fi.Mode().Perm(), f.mode)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, PartialDir)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s left behind after a complete pull", PartialDir)
	}
	marker, _ := os.ReadFile(filepath.Join(dir, ReadyMarker))
	if strings.TrimSpace(string(marker)) != res.Manifest.SetDigest {
		t.Errorf("marker %q, want %s", marker, res.Manifest.SetDigest)
	}
	// The top level holds the model directory and kiln's bookkeeping; the
	// model directory (what the application mounts) the model files alone.
	top, _ := os.ReadDir(dir)
	var names []string
	for _, e := range top {
		names = append(names, e.Name())
	}
	if want := []string{LayoutMarker, LockFile, ManifestFile, ReadyMarker, ModelDir}; fmt.Sprint(names) != fmt.Sprint(want) {
		t.Errorf("the volume's top level holds %v, want %v", names, want)
	}
	inModel := map[string]bool{}
	for p := range tree(t, filepath.Join(dir, ModelDir)) {
		inModel[filepath.ToSlash(p)] = true
	}
	for _, f := range modelFiles {
		delete(inModel, strings.TrimPrefix(f.path, "app/models/"))
	}
	if len(inModel) != 0 {
		t.Errorf("the model directory holds more than the model files: %v", inModel)
	}
	// The set digest is what coreutils computes over the model directory,
	// every file in it.
	if _, err := exec.LookPath("sha256sum"); err == nil {
		cmd := exec.Command("sh", "-c", `find . -type f -printf '%P\n' | LC_ALL=C sort | xargs -d '\n' sha256sum | sha256sum`)
		cmd.Dir = filepath.Join(dir, ModelDir)
		out, err := cmd.Output()
		if err != nil {
			t.Fatal(err)
		}
		got := "sha256:" + strings.Fields(string(out))[0]
		if got != res.Manifest.SetDigest {
			t.Errorf("sha256sum pipeline gives %s, SetDigest %s", got, res.Manifest.SetDigest)
		}
	}
	rep, err := Verify(ctx, dir, nil, 2)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK {
		t.Errorf("fresh volume does not verify: %+v", rep.Problems)
	}
	// A second pull finds the marker and does nothing.
	r2, err := Pull(ctx, res.Manifest, res.Source, dir, PullOptions{})
	if err != nil || !r2.AlreadyReady {
		t.Errorf("second pull: %+v, %v", r2, err)
	}
}

func TestVerifyFindsTampering(t *testing.T) {
	ctx := context.Background()
	res, _ := publishLayout(t, modelFiles)
	cases := []struct {
		name   string
		tamper func(dir string) error
		want   string
	}{
		{"flipped byte", func(d string) error {
			f, err := os.OpenFile(filepath.Join(d, ModelDir, "llm/model-00001.safetensors"), os.O_WRONLY, 0)
			if err != nil {
				return err
			}
			defer f.Close()
			_, err = f.WriteAt([]byte{'X'}, 1000)
			return err
		}, "llm/model-00001.safetensors: sha256"},
		{"missing", func(d string) error { return os.Remove(filepath.Join(d, ModelDir, "tok/tokenizer.json")) }, "tok/tokenizer.json: missing"},
		{"extra", func(d string) error {
			return os.WriteFile(filepath.Join(d, ModelDir, "llm/evil.py"), []byte("x"), 0o644)
		}, "llm/evil.py: extra file"},
		{"truncated", func(d string) error { return os.Truncate(filepath.Join(d, ModelDir, "llm/config.json"), 3) }, "llm/config.json: size 3"},
		{"mode", func(d string) error { return os.Chmod(filepath.Join(d, ModelDir, "llm/config.json"), 0o666) }, "llm/config.json: mode"},
		{"marker", func(d string) error { return os.WriteFile(filepath.Join(d, ReadyMarker), []byte("sha256:00\n"), 0o644) }, ".kiln-ready: holds"},
		{"symlink", func(d string) error { return os.Symlink("/etc/passwd", filepath.Join(d, ModelDir, "llm/link")) }, "llm/link: is a symlink"},
		// The model directory is what the application sees: kiln's names
		// in it are extra files, not bookkeeping.
		{"bookkeeping in the model directory", func(d string) error {
			return os.WriteFile(filepath.Join(d, ModelDir, ManifestFile), []byte("{}"), 0o644)
		}, ManifestFile + ": extra file"},
		{"model directory a symlink", func(d string) error {
			if err := os.Rename(filepath.Join(d, ModelDir), filepath.Join(d, "elsewhere")); err != nil {
				return err
			}
			return os.Symlink("elsewhere", filepath.Join(d, ModelDir))
		}, ModelDir + ": not a directory"},
		{"model directory gone", func(d string) error { return os.RemoveAll(filepath.Join(d, ModelDir)) }, "llm/config.json: missing"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if _, err := Pull(ctx, res.Manifest, res.Source, dir, PullOptions{}); err != nil {
				t.Fatal(err)
			}
			if err := tc.tamper(dir); err != nil {
				t.Fatal(err)
			}
			rep, err := Verify(ctx, dir, nil, 2)
			if err != nil {
				t.Fatal(err)
			}
			var lines []string
			for _, p := range rep.Problems {
				lines = append(lines, p.Path+": "+p.Problem)
			}
			if rep.OK || !strings.Contains(strings.Join(lines, "\n"), tc.want) {
				t.Errorf("ok=%v problems %q, want %q", rep.OK, lines, tc.want)
			}
		})
	}
}

// cutServer fronts an in-process registry: the first GET of blob `cut`
// sends half of it and drops the connection; every request's Range header
// and the blob bytes sent are recorded.
type cutServer struct {
	h        http.Handler
	cut      string
	mu       sync.Mutex
	cutDone  bool
	ranges   []string
	sent     int64
	cutBytes int64
}

type countingWriter struct {
	http.ResponseWriter
	s *cutServer
}

func (w countingWriter) Write(b []byte) (int, error) {
	w.s.mu.Lock()
	w.s.sent += int64(len(b))
	w.s.mu.Unlock()
	return w.ResponseWriter.Write(b)
}

func (s *cutServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet || !strings.HasSuffix(r.URL.Path, "/blobs/"+s.cut) {
		s.h.ServeHTTP(w, r)
		return
	}
	s.mu.Lock()
	s.ranges = append(s.ranges, r.Header.Get("Range"))
	first := !s.cutDone
	s.cutDone = true
	s.mu.Unlock()
	if !first {
		s.h.ServeHTTP(countingWriter{w, s}, r)
		return
	}
	rec := httptest.NewRecorder()
	s.h.ServeHTTP(rec, r)
	body := rec.Body.Bytes()
	for k, v := range rec.Header() {
		w.Header()[k] = v
	}
	w.Header().Set("Content-Length", fmt.Sprint(len(body)))
	w.WriteHeader(rec.Code)
	countingWriter{w, s}.Write(body[:s.cutBytes])
	w.(http.Flusher).Flush()
	conn, _, err := w.(http.Hijacker).Hijack()
	if err == nil {
		conn.Close()
	}
}

func TestPullResumesWithRange(t *testing.T) {
	ctx := context.Background()
	large := testFile{"m/big.safetensors", body("big", 4<<20+123), 0o644}
	c := collect(t, []testFile{large, {"m/config.json", []byte("{}"), 0o644}}, WithLargeFileThreshold(1<<20))
	cs := &cutServer{h: registry.New(registry.Logger(log.New(io.Discard, "", 0))), cut: "sha256:" + hexOf(large.data), cutBytes: 1<<20 + 5}
	srv := httptest.NewServer(cs)
	defer srv.Close()
	u, _ := url.Parse(srv.URL)
	ref := u.Host + "/kiln-weights/resume:v1"
	if _, _, err := c.Publish(ctx, testkit.Ref(t, ref), "", ""); err != nil {
		t.Fatal(err)
	}
	res, err := Resolve(ctx, ref, "", noFetchRetries)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	// One attempt: the broken transfer fails this run and stays on disk.
	_, err = Pull(ctx, res.Manifest, res.Source, dir, PullOptions{Attempts: 1})
	if err == nil || !strings.Contains(err.Error(), "kept in .kiln-partial to resume") {
		t.Fatalf("cut transfer: err = %v", err)
	}
	part := filepath.Join(dir, PartialDir, hexOf(large.data)+".part")
	fi, err := os.Stat(part)
	if err != nil || fi.Size() != cs.cutBytes {
		t.Fatalf("partial after the cut: %v, %v (want %d bytes)", fi, err, cs.cutBytes)
	}
	if _, err := os.Stat(filepath.Join(dir, ModelDir, "big.safetensors")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("an unverified file was put in place")
	}
	if _, err := os.Stat(filepath.Join(dir, ModelDir, "config.json")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a file was committed before every blob was verified")
	}
	cs.mu.Lock()
	cs.sent = 0
	cs.mu.Unlock()
	r, err := Pull(ctx, res.Manifest, res.Source, dir, PullOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cs.mu.Lock()
	defer cs.mu.Unlock()
	rest := int64(len(large.data)) - cs.cutBytes
	if len(cs.ranges) != 2 || !strings.HasPrefix(cs.ranges[1], fmt.Sprintf("bytes=%d-", cs.cutBytes)) {
		t.Errorf("Range headers %q, want the rerun to ask from byte %d", cs.ranges, cs.cutBytes)
	}
	if cs.sent != rest {
		t.Errorf("the rerun moved %d bytes of the blob, want only the missing %d", cs.sent, rest)
	}
	if r.Resumed != cs.cutBytes {
		t.Errorf("resumed %d, want %d", r.Resumed, cs.cutBytes)
	}
	if rep, err := Verify(ctx, dir, nil, 1); err != nil || !rep.OK {
		t.Errorf("resumed volume: %+v %v", rep, err)
	}
}

func TestPullRejectsCorruptBlob(t *testing.T) {
	ctx := context.Background()
	res, lay := publishLayout(t, modelFiles)
	d := hexOf(modelFiles[0].data)
	blob := filepath.Join(lay, "blobs", "sha256", d)
	f, err := os.OpenFile(blob, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteAt([]byte("corrupt"), 4096)
	f.Close()
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "old.txt"), []byte("keep"), 0o644)
	before := tree(t, dir)
	_, err = Pull(ctx, res.Manifest, res.Source, dir, PullOptions{})
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "sha256:"+d) {
		t.Fatalf("err = %v, want a corrupt-blob error naming it", err)
	}
	if _, err := os.Stat(filepath.Join(dir, PartialDir, d+".part")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the corrupt partial was kept")
	}
	after := tree(t, dir)
	delete(after, PartialDir) // other blobs' verified partials may remain for the rerun
	for k := range after {
		if strings.HasPrefix(k, PartialDir+"/") {
			delete(after, k)
		}
	}
	if fmt.Sprint(before) != fmt.Sprint(after) {
		t.Errorf("volume changed: before %v after %v", before, after)
	}
}

func TestPullRefusesSymlinkInVolume(t *testing.T) {
	ctx := context.Background()
	res, _ := publishLayout(t, modelFiles)
	for _, tc := range []struct {
		name, link, want string
	}{
		{"below the model directory", filepath.Join(ModelDir, "llm"), "is a symlink"},
		{"the model directory", ModelDir, "symlinks are not followed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, outside := t.TempDir(), t.TempDir()
			os.MkdirAll(filepath.Dir(filepath.Join(dir, tc.link)), 0o755)
			if err := os.Symlink(outside, filepath.Join(dir, tc.link)); err != nil {
				t.Fatal(err)
			}
			_, err := Pull(ctx, res.Manifest, res.Source, dir, PullOptions{})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v", err)
			}
			if got := tree(t, outside); len(got) != 0 {
				t.Errorf("files written through the link: %v", got)
			}
		})
	}
}

func TestPullFullDisk(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a small tmpfs")
	}
	ctx := context.Background()
	res, _ := publishLayout(t, []testFile{{"m/big.safetensors", body("full", 3<<20), 0o644}, {"m/a.json", []byte("{}"), 0o644}})
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("mount tmpfs: %v %s", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", dir).Run() })
	os.WriteFile(filepath.Join(dir, LayoutMarker), []byte(ModelDir+"\n"), 0o644)
	os.Mkdir(filepath.Join(dir, ModelDir), 0o755)
	os.WriteFile(filepath.Join(dir, ModelDir, "a.json"), []byte(`{"old": true}`), 0o644)
	os.WriteFile(filepath.Join(dir, ReadyMarker), []byte("sha256:old\n"), 0o644)
	before := tree(t, dir)
	// Refused by the preflight before a byte is fetched (the volume's
	// files need 3 MiB of the 2 MiB there).
	_, err := Pull(ctx, res.Manifest, res.Source, dir, PullOptions{})
	if !errors.Is(err, preflight.ErrNoSpace) || !strings.Contains(err.Error(), "nothing was fetched") {
		t.Fatalf("err = %v", err)
	}
	// Past the preflight (a disk that fills while the pull runs): the
	// write path's own handling changes nothing either.
	_, err = Pull(ctx, res.Manifest, res.Source, dir, PullOptions{SkipSpaceCheck: true})
	if err == nil || !strings.Contains(err.Error(), "no space left") || !strings.Contains(err.Error(), "nothing was changed") {
		t.Fatalf("err = %v", err)
	}
	if after := tree(t, dir); fmt.Sprint(before) != fmt.Sprint(after) {
		t.Errorf("volume changed on a full disk:\nbefore %v\nafter  %v", before, after)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, ModelDir, "a.json")); string(b) != `{"old": true}` {
		t.Errorf("old file replaced: %q", b)
	}
}

// Issue 25 item 7: a bar per file. BlobProgress gives each blob its own
// counter as its fetch starts; each ends at its blob's size and the blobs'
// bytes are not counted again in Progress.
func TestPullBlobProgressPerBlob(t *testing.T) {
	ctx := context.Background()
	res, _ := publishLayout(t, []testFile{{"m/model-00001-of-00002.safetensors", body("a", 2<<20), 0o644}, {"m/model-00002-of-00002.safetensors", body("b", 1<<20), 0o644}, {"m/config.json", []byte("{}"), 0o644}})
	var mu sync.Mutex
	per := map[string]*atomic.Int64{}
	var total atomic.Int64
	if _, err := Pull(ctx, res.Manifest, res.Source, t.TempDir(), PullOptions{Progress: &total, BlobProgress: func(d string, size int64) *atomic.Int64 {
		c := new(atomic.Int64)
		mu.Lock()
		defer mu.Unlock()
		per[d] = c
		return c
	}}); err != nil {
		t.Fatal(err)
	}
	var sum int64
	for _, l := range res.Manifest.Layers {
		c := per[l.Digest]
		if c == nil || c.Load() != l.Size {
			t.Errorf("blob %s (%d bytes): counter %v", l.Digest, l.Size, c)
			continue
		}
		sum += c.Load()
	}
	if sum+total.Load() < res.Manifest.Size-int64(len(res.Manifest.Layers))*4096 || len(per) != len(res.Manifest.Layers) {
		t.Errorf("%d counters for %d blobs; %d + %d bytes counted of %d", len(per), len(res.Manifest.Layers), sum, total.Load(), res.Manifest.Size)
	}
}

// weights pull checks the volume's disk for what it writes at its peak
// before it fetches a byte (it said 22 MiB were needed, passed, and ran
// out of space at 40 MiB): here a manifest whose files no disk holds is
// refused at once, nothing fetched, nothing left (issue 36 item 4).
func TestPullPreflightsTheDisk(t *testing.T) {
	res, _ := publishLayout(t, modelFiles)
	m := *res.Manifest
	m.Files = append([]File(nil), m.Files...)
	m.Size += 1<<60 - m.Files[0].Size
	m.Files[0].Size = 1 << 60
	dir := filepath.Join(t.TempDir(), "vol")
	r, err := Pull(context.Background(), &m, res.Source, dir, PullOptions{})
	if !errors.Is(err, preflight.ErrNoSpace) || !strings.Contains(err.Error(), "nothing was fetched") {
		t.Fatalf("a volume no disk holds: %+v, %v", r, err)
	}
	if ents, _ := os.ReadDir(filepath.Join(dir, PartialDir)); len(ents) != 0 {
		t.Errorf("left %v", ents)
	}
}
