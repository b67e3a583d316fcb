package warmcmd

import (
	"encoding/json"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/registry"

	"github.com/kiln-build/kiln/cmd/kiln/internal/cmdtest"
	"github.com/kiln-build/kiln/cmd/kiln/internal/cmdutil"
	"github.com/kiln-build/kiln/cmd/kiln/weightscmd"
	"github.com/kiln-build/kiln/internal/testimage"
	"github.com/kiln-build/kiln/warm"
	"github.com/kiln-build/kiln/weights"
)

// A slimmed image and its weights artifact (kiln weights strip, in-process
// registry) warmed together: the image's label leads to the volume.
func TestWarmWeightsIntoFollowsLabel(t *testing.T) {
	slimRef, wref := cmdtest.StrippedApp(t, testimage.Registry(t), weightscmd.NewCmdWeights)
	dir := t.TempDir()
	oci, vol := filepath.Join(dir, "oci"), filepath.Join(dir, "vol")
	ready := filepath.Join(dir, "ready")
	warmJSON := func(wantCode int, extra ...string) warm.Report {
		t.Helper()
		args := append([]string{"warm", slimRef, "--target", "oci:" + oci, "--weights-into", vol, "--platform", "linux/amd64", "--json", "--progress", "none"}, extra...)
		code, out, errOut := run(t, args...)
		if code != wantCode {
			t.Fatalf("%v: exit %d, want %d\n%s\n%s", extra, code, wantCode, out, errOut)
		}
		var r warm.Report
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatalf("--json: %v\n%s", err, out)
		}
		if len(r.Weights) != 1 {
			t.Fatalf("weights section: %+v", r.Weights)
		}
		return r
	}
	fileStates := func(w *warm.WeightsReport) map[string]string {
		m := map[string]string{}
		for _, f := range w.Files {
			m[f.Path] = f.State
		}
		return m
	}

	// Cold: the dry run counts the weight files as missing bytes.
	r := warmJSON(cmdutil.ExitNotReady, "--dry-run")
	w := r.Weights[0]
	if w.State != warm.StateMissing || w.MissingBytes != w.Bytes || w.Bytes < 20<<20 || w.Image != slimRef || w.Ref != wref {
		t.Fatalf("dry run weights: %+v", w)
	}
	if r.MissingBytes < w.Bytes {
		t.Errorf("missing_bytes %d leaves out the weights' %d", r.MissingBytes, w.Bytes)
	}

	// Warm: image blobs and the volume, verified; the marker is written.
	r = warmJSON(cmdutil.ExitOK, "--ready-file", ready)
	w = r.Weights[0]
	if !r.Ready || w.State != warm.StateFetched || w.FetchedBytes < w.Bytes || w.MissingBytes != 0 {
		t.Fatalf("warm: ready=%v weights %+v", r.Ready, w)
	}
	for p, s := range fileStates(w) {
		if s != warm.StateFetched {
			t.Errorf("%s: %s, want fetched", p, s)
		}
	}
	if vr, err := weights.Verify(t.Context(), vol, nil, 2); err != nil || !vr.OK {
		t.Fatalf("volume does not verify: %+v %v", vr, err)
	}
	if _, err := os.Stat(ready); err != nil {
		t.Fatal(err)
	}

	// Rerun: nothing fetched, everything present.
	r = warmJSON(cmdutil.ExitOK)
	w = r.Weights[0]
	if !r.Ready || r.FetchedBytes != 0 || w.State != warm.StatePresent || w.FetchedBytes != 0 {
		t.Fatalf("rerun: fetched %d, weights %+v", r.FetchedBytes, w)
	}

	// Tamper with the large file (same size, one byte flipped): the
	// marker still holds the set digest, but the dry run sees it, and the
	// warm fetches exactly that file again.
	big := filepath.Join(vol, weights.ModelDir, "m-00001.safetensors")
	b, err := os.ReadFile(big)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0xff
	if err := os.WriteFile(big, b, 0o644); err != nil {
		t.Fatal(err)
	}
	r = warmJSON(cmdutil.ExitNotReady, "--dry-run")
	w = r.Weights[0]
	var tampered warm.WeightsFile
	for _, f := range w.Files {
		if f.Path == "m-00001.safetensors" {
			tampered = f
		} else if f.State != warm.StatePresent {
			t.Errorf("untouched %s: %s", f.Path, f.State)
		}
	}
	if tampered.State != warm.StateMissing || !strings.Contains(tampered.Problem, "sha256") || w.MissingBytes != int64(len(b)) {
		t.Fatalf("dry run after tampering: %+v (missing %d)", tampered, w.MissingBytes)
	}
	r = warmJSON(cmdutil.ExitOK)
	w = r.Weights[0]
	if st := fileStates(w); st["m-00001.safetensors"] != warm.StateFetched || st["m-00002.safetensors"] != warm.StatePresent {
		t.Errorf("after tampering: %v", st)
	}
	if w.FetchedBytes != int64(len(b)) || r.FetchedBytes != w.FetchedBytes {
		t.Errorf("re-fetched %d bytes (report total %d), want only the tampered file's %d", w.FetchedBytes, r.FetchedBytes, len(b))
	}
	if vr, err := weights.Verify(t.Context(), vol, nil, 2); err != nil || !vr.OK {
		t.Fatalf("volume does not verify after the repair: %+v %v", vr, err)
	}
}

// WEIGHTS arguments: the artifact reference and a volume manifest file.
func TestWarmWeightsArguments(t *testing.T) {
	_, wref := cmdtest.StrippedApp(t, testimage.Registry(t), weightscmd.NewCmdWeights)
	dir := t.TempDir()
	oci := "oci:" + filepath.Join(dir, "oci")
	// Without --weights-into: a usage error naming the flag.
	if code, _, errOut := run(t, "warm", wref, "--target", oci, "--progress", "none"); code != cmdutil.ExitUsage || !strings.Contains(errOut, "--weights-into") {
		t.Fatalf("weights arg without --weights-into: exit %d %s", code, errOut)
	}
	vol := filepath.Join(dir, "vol")
	code, out, errOut := run(t, "warm", wref, "--target", oci, "--weights-into", vol, "--json", "--progress", "none")
	if code != cmdutil.ExitOK {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	var r warm.Report
	if err := json.Unmarshal([]byte(out), &r); err != nil || !r.Ready || len(r.Images) != 0 || len(r.Weights) != 1 || r.Weights[0].State != warm.StateFetched {
		t.Fatalf("report %+v %v", r, err)
	}
	// The manifest the pull kept names its repository: a second volume
	// from the manifest file alone.
	vol2 := filepath.Join(dir, "vol2")
	code, out, errOut = run(t, "warm", filepath.Join(vol, weights.ManifestFile), "--target", oci, "--weights-into", vol2, "--json", "--progress", "none")
	if code != cmdutil.ExitOK {
		t.Fatalf("manifest file: exit %d\n%s\n%s", code, out, errOut)
	}
	if vr, err := weights.Verify(t.Context(), vol2, nil, 2); err != nil || !vr.OK {
		t.Fatalf("volume from the manifest file: %+v %v", vr, err)
	}
}

// TestWarmWeightsIntoPassesTransferFlags: warm's --concurrency,
// --chunk-size and --limit-rate reach the --weights-into pull: Range
// requests of the chunk size, at most 2×concurrency in flight, and the
// rate cap (the 20 MiB volume at 20 MiB/s takes about a second).
func TestWarmWeightsIntoPassesTransferFlags(t *testing.T) {
	var mu sync.Mutex
	var inFlight, maxInFlight int
	var maxRange int64
	h := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet || !strings.Contains(r.URL.Path, "/serve-weights/blobs/") {
			h.ServeHTTP(w, r)
			return
		}
		mu.Lock()
		inFlight++
		maxInFlight = max(maxInFlight, inFlight)
		mu.Unlock()
		cw := &countingBody{ResponseWriter: w}
		h.ServeHTTP(cw, r)
		mu.Lock()
		inFlight--
		maxRange = max(maxRange, cw.n)
		mu.Unlock()
	}))
	defer srv.Close()
	slimRef, _ := cmdtest.StrippedApp(t, strings.TrimPrefix(srv.URL, "http://"), weightscmd.NewCmdWeights)
	dir := t.TempDir()
	mu.Lock()
	maxInFlight, maxRange = 0, 0
	mu.Unlock()
	start := time.Now()
	code, out, errOut := run(t, "warm", slimRef, "--target", "oci:"+filepath.Join(dir, "oci"), "--weights-into", filepath.Join(dir, "vol"),
		"--platform", "linux/amd64", "--json", "--progress", "none", "--concurrency", "1", "--chunk-size", "1MiB", "--limit-rate", "20MiB")
	el := time.Since(start)
	if code != cmdutil.ExitOK {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	mu.Lock()
	defer mu.Unlock()
	if maxRange > 1<<20 {
		t.Errorf("weights pull read %d bytes in one request; --chunk-size 1MiB", maxRange)
	}
	if maxInFlight > 2 {
		t.Errorf("weights pull had %d requests in flight; --concurrency 1 allows 2", maxInFlight)
	}
	if el < 700*time.Millisecond {
		t.Errorf("20 MiB of weights in %v: --limit-rate 20MiB not applied", el)
	}
}

// countingBody counts the body bytes of a response.
type countingBody struct {
	http.ResponseWriter
	n int64
}

func (c *countingBody) Write(p []byte) (int, error) {
	n, err := c.ResponseWriter.Write(p)
	c.n += int64(n)
	return n, err
}
