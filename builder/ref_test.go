package builder

import (
	"slices"
	"strings"
	"testing"

	"github.com/kiln-build/kiln/recipes"
)

func TestNormalizeRef(t *testing.T) {
	for in, want := range map[string]string{
		"nvidia/cuda:13.0.0-base-ubuntu24.04":                 "docker.io/nvidia/cuda:13.0.0-base-ubuntu24.04",
		"ubuntu":                                              "docker.io/library/ubuntu:latest",
		"docker.io/nvidia/cuda:12.4.1-runtime":                "docker.io/nvidia/cuda:12.4.1-runtime",
		"127.0.0.1:5000/nvidia/cuda:12.4.1-runtime":           "127.0.0.1:5000/nvidia/cuda:12.4.1-runtime",
		"ghcr.io/acme/base@sha256:" + strings.Repeat("a", 64): "ghcr.io/acme/base@sha256:" + strings.Repeat("a", 64),
	} {
		if got, err := NormalizeRef(in); err != nil || got != want {
			t.Errorf("NormalizeRef(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := NormalizeRef("Not/A:Ref:"); err == nil {
		t.Error("a malformed reference normalized")
	}
}

// TestBuildHandsBuildKitFullRefs: a catalog recipe resolved without a
// registry mirror names Docker Hub images by their short names; the
// layout, the LLB source ops and the Dockerfile must all carry the full
// docker.io/… reference (BuildKit's config resolver takes "nvidia" for a
// registry host otherwise) (F14).
func TestBuildHandsBuildKitFullRefs(t *testing.T) {
	p := catalogPlan(t, nil, recipes.WithWheelIndexes(testIndex))
	if strings.HasPrefix(p.BaseImages.Runtime, "docker.io/") || !strings.HasPrefix(p.BaseImages.Runtime, "nvidia/") {
		t.Skipf("the catalog's runtime base is %q, not a short Docker Hub name", p.BaseImages.Runtime)
	}
	L, err := Lower(p)
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range []Stage{L.Devel, L.Runtime} {
		if !strings.HasPrefix(st.Base, "docker.io/nvidia/") {
			t.Errorf("stage %s: base %q, want docker.io/nvidia/…", st.Name, st.Base)
		}
	}
	d, _ := decode(t, p, Inputs{}, false)
	want := "docker-image://docker.io/" + p.BaseImages.Runtime
	if !slices.Contains(d.sources, want) {
		t.Errorf("LLB sources %v lack %s", d.sources, want)
	}
	df, err := Dockerfile(p, Inputs{})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(df, "FROM docker.io/"+p.BaseImages.Runtime+" ") {
		t.Errorf("Dockerfile has no FROM docker.io/%s:\n%s", p.BaseImages.Runtime, df)
	}
}
