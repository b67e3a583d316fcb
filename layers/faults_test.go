package layers_test

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/kiln-build/kiln/internal/testkit"

	kregistry "github.com/kiln-build/kiln/registry"

	"github.com/kiln-build/kiln/internal/testimage"
	"github.com/kiln-build/kiln/layers"
)

// F5 (the registry client's TestStalledAndBrokenBodiesResume, for an
// image's layer): a walk of a registry layer whose body stalls or breaks
// resumes by Range and verifies the whole blob.
// The idle timeout is a second, not 150 ms: the faulty registry answers
// a retry only once it has the whole blob in hand, and under the race
// detector beside CI's other tiers that took longer than 150 ms four times
// running (a failed run of this stop).
func TestStalledAndBrokenLayerWalkResumes(t *testing.T) {
	for _, faults := range testimage.ResumeFaults {
		t.Run(strings.Join(faults, "+"), func(t *testing.T) {
			im := testimage.PushFaultyImage(t)
			fr, ref := im.Faulty, im.Ref
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			opts := []kregistry.Option{kregistry.WithIdleTimeout(time.Second), kregistry.WithFetchOptions(kregistry.WithRetries(3, time.Millisecond))}

			img, err := testkit.OpenImage(ctx, ref, opts...)
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
