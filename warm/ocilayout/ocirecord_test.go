package ocilayout

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kiln-build/kiln/warm"
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
	l, err := New(dir)
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
	s := &warm.Set{}
	for i := range n {
		name := fmt.Sprintf("example.com/app:old%d", i)
		if i%2 == 1 {
			name = fmt.Sprintf("example.com/app:new%d", i)
		}
		s.Images = append(s.Images, warm.Image{Name: name, Manifest: ocispec.Descriptor{MediaType: ocispec.MediaTypeImageManifest, Digest: fresh, Size: 2}})
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
	got := recordEntries(nil, []warm.Image{
		{Name: "x:1", Manifest: ocispec.Descriptor{Digest: a}},
		{Name: "y:1", Manifest: ocispec.Descriptor{Digest: a}},
		{Name: "x:1", Manifest: ocispec.Descriptor{Digest: b}},
	})
	if len(got) != 2 || got[0].Annotations[annRefName] != "y:1" || got[1].Digest != b {
		t.Errorf("entries = %+v", got)
	}
}

// TestOCIRecordRefusesAnIndexItCouldNotReadBack: an index.json grown past
// the bound every layout reader holds it to is not written (200,000
// images made an 86 MB index.json that the same run's Verify then
// refused as too large); the old one stays, and the error says what to do.
func TestOCIRecordRefusesAnIndexItCouldNotReadBack(t *testing.T) {
	dir := t.TempDir()
	l, err := New(dir)
	if err != nil {
		t.Fatal(err)
	}
	s := &warm.Set{}
	for i := range 3 {
		s.Images = append(s.Images, warm.Image{Name: fmt.Sprintf("example.com/app:v%d", i),
			Manifest: ocispec.Descriptor{MediaType: ocispec.MediaTypeImageManifest, Digest: digest.FromString("m"), Size: 2}})
	}
	if err := l.Record(context.Background(), &warm.Set{Images: s.Images[:1]}); err != nil {
		t.Fatal(err)
	}
	before, err := os.ReadFile(filepath.Join(dir, "index.json"))
	if err != nil {
		t.Fatal(err)
	}
	defer func(m int) { maxIndex = m }(maxIndex)
	maxIndex = len(before) + 10
	err = l.Record(context.Background(), s)
	if err == nil || !strings.Contains(err.Error(), "warm into another oci: directory") {
		t.Fatalf("Record past the bound: %v", err)
	}
	after, _ := os.ReadFile(filepath.Join(dir, "index.json"))
	if string(after) != string(before) {
		t.Errorf("index.json changed:\n%s", after)
	}
}
