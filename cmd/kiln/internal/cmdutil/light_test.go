package cmdutil

import (
	"strings"
	"testing"

	"github.com/kiln-build/kiln/internal/testkit"
)

// The toolbox every verb has, and a verb that reaches no registry,
// builder or host (recipes), compile none of the packages that do (issue
// 35: every verb package compiled ~740 packages, BuildKit and containerd
// among them, through the Factory). What they may not import: kiln's
// registry and image packages and the outside clients below them.
func TestToolboxIsLight(t *testing.T) {
	heavy := []string{
		"github.com/kiln-build/kiln/registry", "github.com/kiln-build/kiln/layers",
		"github.com/kiln-build/kiln/builder", "github.com/kiln-build/kiln/warm",
		"github.com/google/go-containerregistry/", "github.com/moby/buildkit/",
		"github.com/containerd/", "google.golang.org/grpc",
	}
	for _, pkg := range []string{".", "../../recipescmd"} {
		deps := testkit.Deps(t, pkg)
		for _, d := range deps {
			for _, h := range heavy {
				if d == h || strings.HasSuffix(h, "/") && strings.HasPrefix(d, h) || strings.HasPrefix(d, h+"/") {
					t.Errorf("%s compiles %s", pkg, d)
				}
			}
		}
		if len(deps) > 250 {
			t.Errorf("%s compiles %d packages (at most 250)", pkg, len(deps))
		}
	}
}
