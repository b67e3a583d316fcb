package verbkit

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/kiln-build/kiln/analyze"
	"github.com/kiln-build/kiln/cmd/kiln/internal/cmdutil"
	"github.com/kiln-build/kiln/internal/termtable"
	"github.com/kiln-build/kiln/layers"
)

// CheckImage is analyze.CheckImage with progress on ios.ErrOut (mode: a
// --progress value): a bar for the image and, on a terminal, one for
// each layer while it is read. kiln analyze and kiln build --check.
func CheckImage(ctx context.Context, ios *cmdutil.IO, mode string, img *layers.Image, rules *analyze.Rules, gpus []string, o analyze.Options) (*analyze.Report, []analyze.Violation, error) {
	p := cmdutil.NewProgress(ios.ErrOut, mode)
	defer p.Stop()
	o.LayerProgress = LayerBars(p, "analyzing "+img.Ref.Raw, img)
	return analyze.CheckImage(ctx, img, rules, gpus, o)
}

// LayerBars draws a bar labelled label for img's stored size, and returns
// the function that gives each layer, when its read starts, a counter
// with a bar of its own on a terminal (gone once the layer is read).
func LayerBars(p *cmdutil.Progress, label string, img *layers.Image) func(*layers.Layer) *atomic.Int64 {
	part := p.Parts(label, img.CompressedSize(), new(atomic.Int64))
	var mu sync.Mutex
	counters := make([]*atomic.Int64, len(img.Layers))
	return func(l *layers.Layer) *atomic.Int64 {
		if l.Index < 0 || l.Index >= len(counters) {
			return nil
		}
		mu.Lock()
		defer mu.Unlock()
		// One counter (and bar) per layer, however often its read starts.
		if counters[l.Index] == nil {
			counters[l.Index] = part(fmt.Sprintf("  layer %d %s", l.Index, termtable.Digest(l.Digest.String())), l.Size)
		}
		return counters[l.Index]
	}
}
