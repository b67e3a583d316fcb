package recipes

import (
	"context"
	"strings"
	"testing"

	"github.com/kiln-build/kiln/cuda"
)

func resolveCatalog(t *testing.T, name string) *Plan {
	t.Helper()
	b, err := CatalogRecipe(name)
	if err != nil {
		t.Fatal(err)
	}
	r, err := Parse(name+".yaml", b)
	if err != nil {
		t.Fatal(err)
	}
	p, err := Resolve(context.Background(), r)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return p
}

// TestDefaultRecipeIsCurrent: kiln recipes init with no name writes a
// stack a user can build: NVIDIA's Ubuntu images on Docker Hub (not the
// fixture registry's Debian 13 bases) and the newest torch kiln's data
// pairs with that CUDA. The offline test stack keeps its own name.
func TestDefaultRecipeIsCurrent(t *testing.T) {
	if DefaultRecipe == OfflineRecipe {
		t.Fatalf("the default recipe is the offline test stack %s", OfflineRecipe)
	}
	if _, err := CatalogRecipe(OfflineRecipe); err != nil {
		t.Fatal(err)
	}
	p := resolveCatalog(t, DefaultRecipe)
	for _, img := range []string{p.BaseImages.Devel, p.BaseImages.Runtime} {
		if !strings.HasPrefix(img, "docker.io/nvidia/cuda:") || !strings.Contains(img, "-ubuntu") {
			t.Errorf("default recipe base %q: want NVIDIA's Ubuntu image on Docker Hub", img)
		}
	}
	if p.Torch == nil {
		t.Fatal("default recipe has no torch")
	}
	mine := cuda.MajorMinor(*p.Torch)
	db, err := Data()
	if err != nil {
		t.Fatal(err)
	}
	for _, rel := range db.Torch.Releases {
		if cuda.CompareVersions(rel.Minor, mine) <= 0 {
			continue
		}
		for _, v := range rel.Variants {
			if v.Stable && v.CUDA == cuda.MajorMinor(p.CUDA) {
				t.Errorf("default recipe pairs CUDA %s with torch %s, but torch %s has stable %s wheels", p.CUDA, *p.Torch, rel.Minor, v.Name)
			}
		}
	}
}

// TestCatalogHoldsNewestTorch: the catalog has a stack on the newest
// torch release kiln's data knows.
func TestCatalogHoldsNewestTorch(t *testing.T) {
	db, err := Data()
	if err != nil {
		t.Fatal(err)
	}
	newest := db.Torch.Releases[len(db.Torch.Releases)-1].Minor
	all, err := Catalog()
	if err != nil {
		t.Fatal(err)
	}
	var have []string
	for _, e := range all {
		if p := resolveCatalog(t, e.Name); p.Torch != nil {
			if cuda.MajorMinor(*p.Torch) == newest {
				return
			}
			have = append(have, *p.Torch)
		}
	}
	t.Errorf("no catalog recipe uses torch %s, the newest release kiln knows (catalog: %s)", newest, strings.Join(have, ", "))
}
