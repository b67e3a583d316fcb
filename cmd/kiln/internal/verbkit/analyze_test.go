package verbkit

import (
	"fmt"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/kiln-build/kiln/cmd/kiln/internal/cmdutil"
	"github.com/kiln-build/kiln/cmd/kiln/internal/termtest"
	"github.com/kiln-build/kiln/layers"
)

// A layer gets its bar when its read starts, under the image's bar, which
// counts every layer's bytes.
func TestLayerBarsOnePerLayerUnderTheImage(t *testing.T) {
	tty, out, seen := termtest.OpenTerm(t, 80)
	img := &layers.Image{}
	for i := range 3 {
		h, _ := v1.NewHash("sha256:" + strings.Repeat(fmt.Sprint(i), 64))
		img.Layers = append(img.Layers, &layers.Layer{Index: i, Size: 10 << 20, Digest: h})
	}
	p := cmdutil.NewProgress(tty, "tty")
	layer := LayerBars(p, "analyzing img", img)
	c1 := layer(img.Layers[1])
	c1.Store(5 << 20)
	termtest.WaitFor(t, "layer 1's bar", func() bool { return seen("5.0 MiB / 10.0 MiB") })
	if !seen("layer 1 sha256:111111111111") {
		t.Errorf("layer 1 not named: %q", out())
	}
	termtest.WaitFor(t, "the image's bar", func() bool { return seen("5.0 MiB / 30.0 MiB") })
	if seen("layer 0 ") || seen("layer 2 ") {
		t.Error("a bar for a layer whose read has not started")
	}
	c1.Store(10 << 20)
	layer(img.Layers[0]).Store(10 << 20)
	layer(img.Layers[2]).Store(10 << 20)
	p.Stop()
	o := out()
	termtest.CheckFrames(t, o, 80)
	if !strings.Contains(o, "30.0 MiB / 30.0 MiB") {
		t.Errorf("the image's bar does not end at its size:\n%q", o)
	}
}
