package cmdutil

import (
	"context"
	"sync/atomic"

	"github.com/kiln-build/kiln/analyze"
	"github.com/kiln-build/kiln/layers"
)

// CheckImage is analyze.CheckImage with a progress bar on ios.ErrOut
// (mode: a --progress value): kiln analyze and kiln build --check.
func CheckImage(ctx context.Context, ios *IO, mode string, img *layers.Image, rules *analyze.Rules, gpus []string, o analyze.Options) (*analyze.Report, []analyze.Violation, error) {
	var done atomic.Int64
	o.Progress = &done
	bar := StartProgress(ios.ErrOut, mode, "analyzing "+img.Ref.Raw, img.CompressedSize(), &done)
	defer bar.Stop()
	return analyze.CheckImage(ctx, img, rules, gpus, o)
}
