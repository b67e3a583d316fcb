package recipes

import (
	"context"
	"testing"

	"github.com/kiln-build/kiln/layers"
)

// Every catalog recipe's plan names its base images in full, as kiln
// reads references: `kiln lock` failed for every catalog recipe with
// "not a valid reference: could not parse reference: nvidia/cuda:…"
// before any network access, and a plan saying nvidia/cuda left the
// reader to know that means Docker Hub.
func TestCatalogBaseImagesAreFullNames(t *testing.T) {
	all, err := Catalog()
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range all {
		r, err := Parse(e.Name+".yaml", e.Source)
		if err != nil {
			t.Fatal(err)
		}
		p, err := Resolve(context.Background(), r)
		if err != nil {
			t.Errorf("%s: %v", e.Name, err)
			continue
		}
		for _, ref := range []string{p.BaseImages.Devel, p.BaseImages.Runtime} {
			pr, err := layers.ParseRef(ref)
			if err != nil {
				t.Errorf("%s: base image %s: %v", e.Name, ref, err)
				continue
			}
			if pr.Name.String() != ref {
				t.Errorf("%s: base image %s is recorded short; in full it is %s", e.Name, ref, pr.Name)
			}
		}
	}
}
