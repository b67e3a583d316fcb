package weights

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kiln-build/kiln/internal/testkit"
)

// One tag rule for every layout reader (layers.MatchesTag): an artifact
// recorded under its full name (ref.name REPO:TAG, as kiln warm's oci:
// target and kiln weights strip write it) is found by oci:DIR:TAG, as an
// image in the same layout is; the weights reader wanted the full name
// only. A tag that names nothing still says what the layout holds.
func TestLayoutTagRuleIsLayers(t *testing.T) {
	c := collect(t, modelFiles, WithLargeFileThreshold(1<<20))
	lay := filepath.Join(t.TempDir(), "layout")
	ctx := context.Background()
	if _, _, err := c.Publish(ctx, testkit.Ref(t, "oci:"+lay+":example.com/models/w:v1"), "", "sha256:"+strings.Repeat("3", 64)); err != nil {
		t.Fatal(err)
	}
	for _, ref := range []string{"oci:" + lay + ":v1", "oci:" + lay + ":example.com/models/w:v1", "oci:" + lay} {
		res, err := Resolve(ctx, ref, "")
		if err != nil {
			t.Errorf("%s: %v", ref, err)
			continue
		}
		if len(res.Manifest.Files) == 0 || !strings.HasPrefix(res.Ref, "oci:") {
			t.Errorf("%s: resolved %+v", ref, res)
		}
	}
	_, err := Resolve(ctx, "oci:"+lay+":v2", "")
	if err == nil || !strings.Contains(err.Error(), `no image tagged "v2"`) || !strings.Contains(err.Error(), "example.com/models/w:v1") {
		t.Errorf("a tag the layout does not hold: %v", err)
	}
}
