package warm_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kiln-build/kiln/internal/testkit"

	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/kiln-build/kiln/internal/testimage"
	"github.com/kiln-build/kiln/warm"
	"github.com/kiln-build/kiln/warm/internal/warmtest"
	"github.com/kiln-build/kiln/warm/ocilayout"
)

// TestWarmRefusesHostileEntries (N7, issue 34's one entry rule): a
// layer whose entries kiln's rule refuses (a 2 GiB GNU-sparse file in a
// few hundred bytes, type V, a path out of the root) is never READY: the
// check that reads every fetched layer back against its diff ID applies
// layers.CheckEntry, before any unpack may use the blob.
func TestWarmRefusesHostileEntries(t *testing.T) {
	ctx := context.Background()
	hostile := testimage.HostileTars(t)
	for name, tc := range map[string]struct {
		tar  []byte
		want string
	}{
		"sparse":     {testimage.SparseTar("data/big", 2<<30), `"data/big" is a GNU sparse file`},
		"sparse-pax": {testimage.SparsePAXTar("data/big", 2<<30), `"data/big" is a GNU sparse file`},
		"type-v":     {hostile["type-v"], "tar type 'V'"},
		"traversal":  {hostile["traversal"], "leaves the image root"},
	} {
		t.Run(name, func(t *testing.T) {
			src := t.TempDir()
			testimage.WriteLayout(t, src, "x", testimage.Image(t, testimage.Config{}, testimage.RawLayer(tc.tar, types.OCIUncompressedLayer)))
			set, err := warm.Resolve(ctx, testkit.Refs(t, "oci:"+src+":x"), warm.ResolveOptions{Platform: warmtest.AMD64})
			if err != nil {
				t.Fatal(err)
			}
			defer set.Close()
			host, err := ocilayout.New(filepath.Join(t.TempDir(), "host"))
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			rep, err := warm.Warm(ctx, set, host, warm.Options{})
			if err == nil || rep.Ready || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("ready=%v err=%v, want %q", rep.Ready, err, tc.want)
			}
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("took %v", d)
			}
		})
	}
}
