package layers_test

import (
	"context"
	"io"
	"log"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/types"
	kregistry "github.com/kiln-build/kiln/registry"

	"github.com/kiln-build/kiln/internal/testimage"
	"github.com/kiln-build/kiln/layers"
)

// F5 (the registry client's TestStalledAndBrokenBodiesResume, for an
// image's layer): a walk of a registry layer whose body stalls or breaks
// resumes by Range and verifies the whole blob.
func TestStalledAndBrokenLayerWalkResumes(t *testing.T) {
	for _, faults := range [][]string{{"stall-head"}, {"stall-body"}, {"cut"}, {"stall-body", "cut"}} {
		t.Run(strings.Join(faults, "+"), func(t *testing.T) {
			fr := &testimage.Faulty{Next: registry.New(registry.Logger(log.New(io.Discard, "", 0)))}
			srv := httptest.NewServer(fr)
			defer srv.Close()
			host := strings.TrimPrefix(srv.URL, "http://")
			tarb := testimage.Tar(t, []testimage.Entry{testimage.Sized("data/blob", 300_000)})
			layer := testimage.RawLayer(tarb, types.OCIUncompressedLayer)
			ref := host + "/kiln/faults:x"
			testimage.Push(t, ref, testimage.Image(t, testimage.Config{}, layer))
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			opts := []kregistry.Option{kregistry.WithIdleTimeout(150 * time.Millisecond), kregistry.WithFetchOptions(kregistry.WithRetries(3, time.Millisecond))}

			img, err := layers.Open(ctx, ref, opts...)
			if err != nil {
				t.Fatal(err)
			}
			defer img.Close()
			fr.Faults = append([]string(nil), faults...) // for the layer blob, not the config
			st, err := img.Layers[0].Walk(ctx, layers.WalkOptions{}, func(*layers.Entry, io.Reader) error { return nil })
			if err != nil || !st.Verified {
				t.Fatalf("walk: %+v %v", st, err)
			}
			if len(fr.Faults) != 0 {
				t.Errorf("faults %q not reached", fr.Faults)
			}
		})
	}
}
