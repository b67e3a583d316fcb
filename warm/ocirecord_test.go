package warm

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// TestOCIRecordIsLinearInTheIndex (D16): recording n images into a layout
// whose index.json holds n entries examines each entry a bounded number of
// times; one pass over the index per image made 20,000 entries take 17 s.
// The work is counted, not timed.
func TestOCIRecordIsLinearInTheIndex(t *testing.T) {
	const n = 4000
	dir := t.TempDir()
	l, err := NewOCILayout(dir)
	if err != nil {
		t.Fatal(err)
	}
	old, fresh := digest.FromString("old"), digest.FromString("new")
	idx := ocispec.Index{Versioned: specsVersioned(), MediaType: ocispec.MediaTypeImageIndex}
	for i := range n {
		name := fmt.Sprintf("example.com/app:old%d", i)
		idx.Manifests = append(idx.Manifests, ocispec.Descriptor{MediaType: ocispec.MediaTypeImageManifest, Digest: old, Size: 2,
			Annotations: map[string]string{annRefName: name, annContainerdName: name}})
	}
	b, _ := json.Marshal(idx)
	if err := os.WriteFile(filepath.Join(dir, "index.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	// Half the images replace an entry, half are new.
	s := &Set{}
	for i := range n {
		name := fmt.Sprintf("example.com/app:old%d", i)
		if i%2 == 1 {
			name = fmt.Sprintf("example.com/app:new%d", i)
		}
		s.Images = append(s.Images, Image{Name: name, Manifest: ocispec.Descriptor{MediaType: ocispec.MediaTypeImageManifest, Digest: fresh, Size: 2}})
	}
	before := indexVisits.Load()
	if err := l.Record(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	if err := l.Verify(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	// Record sees the n old entries once, Verify the 1.5n entries after.
	if visits, most := indexVisits.Load()-before, int64(3*n); visits > most {
		t.Errorf("Record and Verify examined %d index entries for %d images over %d entries; want at most %d (linear)", visits, n, n, most)
	}
	got, err := l.ExistingImages()
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != n+n/2 {
		t.Errorf("index.json names %d images, want %d", len(got), n+n/2)
	}
	for _, img := range s.Images {
		if got[img.Name] != fresh {
			t.Fatalf("%s → %s, want %s", img.Name, got[img.Name], fresh)
		}
	}
	if got["example.com/app:old1"] != old {
		t.Errorf("an entry no image replaced changed: %s", got["example.com/app:old1"])
	}
}

// TestOCIRecordLastImageOfANameWins: two images of one name in one set
// leave one entry, the later's, as recording them one by one did.
func TestOCIRecordLastImageOfANameWins(t *testing.T) {
	a, b := digest.FromString("a"), digest.FromString("b")
	got := recordEntries(nil, []Image{
		{Name: "x:1", Manifest: ocispec.Descriptor{Digest: a}},
		{Name: "y:1", Manifest: ocispec.Descriptor{Digest: a}},
		{Name: "x:1", Manifest: ocispec.Descriptor{Digest: b}},
	})
	if len(got) != 2 || got[0].Annotations[annRefName] != "y:1" || got[1].Digest != b {
		t.Errorf("entries = %+v", got)
	}
}
