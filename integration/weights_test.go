//go:build integration

package integration

import (
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/kiln-build/kiln/internal/testdaemon"
	"github.com/kiln-build/kiln/internal/testkit"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/kiln-build/kiln/layers"
	"github.com/kiln-build/kiln/layers/blob"
	"github.com/kiln-build/kiln/weights"
)

// TestWeightsVolumeFromAppFixture takes the app fixture's 300 MB
// safetensors out of its layer into a weights artifact in the local
// registry, pulls the volume back (interrupted once, then resumed), and
// checks it verifies and that its set digest is what sha256sum computes
// over its model directory.
func TestWeightsVolumeFromAppFixture(t *testing.T) {
	testdaemon.PruneAfter(t, true)
	dir, e := fixtures(t)
	ctx := context.Background()
	img, err := testkit.OpenImage(ctx, appRefs(dir, e)["oci"])
	if err != nil {
		t.Fatal(err)
	}
	defer img.Close()
	c, err := weights.NewCollector(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	want := strings.TrimPrefix(e.App.Weights.Path, "/")
	l := img.Layers[e.App.Weights.LayerIndex]
	if _, err := l.Walk(ctx, layers.WalkOptions{}, func(en *layers.Entry, body io.Reader) error {
		if en.Path != want {
			return nil
		}
		return c.Divert(en.Path, en.Header, body)
	}); err != nil {
		t.Fatal(err)
	}
	files := c.Files()
	if len(files) != 1 || files[0].Size != e.App.Weights.Bytes {
		t.Fatalf("diverted %+v, want %s of %d bytes", files, e.App.Weights.Path, e.App.Weights.Bytes)
	}
	to := testkit.Ref(t, registry()+"/kiln-weights/it:app")
	m, dg, err := c.Publish(ctx, to, "", img.Digest.String())
	if err != nil {
		t.Fatal(err)
	}
	if m.Mount != filepath.Dir(e.App.Weights.Path) || m.Layers[0].Digest != "sha256:"+m.Files[0].SHA256 {
		t.Errorf("manifest: mount %s, layer %s for file %s", m.Mount, m.Layers[0].Digest, m.Files[0].SHA256)
	}
	ref, _ := weights.ArtifactRef(to, dg)
	res, err := weights.Resolve(ctx, ref.String(), "")
	if err != nil {
		t.Fatal(err)
	}
	vol := filepath.Join(t.TempDir(), "vol")
	// Interrupt the pull after ~100 MB, then resume it.
	cctx, cancel := context.WithCancel(ctx)
	src := &cancelAfter{Source: res.Source, cancel: cancel, after: 100 << 20}
	if _, err := weights.Pull(cctx, res.Manifest, src, vol, weights.PullOptions{}); err == nil {
		t.Fatal("pull survived its cancellation")
	}
	r, err := weights.Pull(ctx, res.Manifest, res.Source, vol, weights.PullOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if r.Resumed == 0 || r.Fetched >= e.App.Weights.Bytes {
		t.Errorf("second pull fetched %d and resumed %d bytes: it did not resume", r.Fetched, r.Resumed)
	}
	rep, err := weights.Verify(ctx, vol, nil, 2)
	if err != nil || !rep.OK {
		t.Fatalf("volume does not verify: %+v %v", rep, err)
	}
	// The model directory (what the application mounts) holds the files
	// alone: every file in it hashes to the set digest.
	out, err := exec.Command("sh", "-c", `cd "$1" && find . -type f -printf '%P\n' | LC_ALL=C sort | xargs -d '\n' sha256sum | sha256sum`, "sh", filepath.Join(vol, weights.ModelDir)).Output()
	if err != nil {
		t.Fatal(err)
	}
	if got := "sha256:" + strings.Fields(string(out))[0]; got != m.SetDigest {
		t.Errorf("sha256sum gives %s, set digest %s", got, m.SetDigest)
	}
	if b, _ := os.ReadFile(filepath.Join(vol, weights.ReadyMarker)); strings.TrimSpace(string(b)) != m.SetDigest {
		t.Errorf("marker %q", b)
	}
}

// cancelAfter cancels the pull once `after` bytes have been read, over all
// the requests together (a large blob is fetched in parallel chunks).
type cancelAfter struct {
	blob.Source
	cancel context.CancelFunc
	after  int64
	n      atomic.Int64
}

func (c *cancelAfter) Open(ctx context.Context, d v1.Hash, off, n int64) (io.ReadCloser, error) {
	rc, err := c.Source.Open(ctx, d, off, n)
	if err != nil {
		return nil, err
	}
	return &cutReader{ReadCloser: rc, c: c}, nil
}

type cutReader struct {
	io.ReadCloser
	c *cancelAfter
}

func (r *cutReader) Read(p []byte) (int, error) {
	n, err := r.ReadCloser.Read(p)
	if r.c.n.Add(int64(n)) >= r.c.after {
		r.c.cancel()
	}
	return n, err
}
