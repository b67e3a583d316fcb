package analyze

import (
	"context"
	"slices"

	"github.com/kiln-build/kiln/layers"
)

// CheckImage analyzes img and checks the report against rules (nil: no
// rules), the one workflow behind kiln analyze --ci and kiln build
// --check. The GPU targets are gpus and the rules' require_gpus; o's
// GPUs are replaced by them. o.Progress, when set, counts the compressed
// bytes read (the total is img.CompressedSize()).
func CheckImage(ctx context.Context, img *layers.Image, rules *Rules, gpus []string, o Options) (*Report, []Violation, error) {
	if rules != nil {
		gpus = append(slices.Clone(gpus), rules.RequireGPUs...)
	}
	targets, err := ParseGPUTargets(gpus)
	if err != nil {
		return nil, nil, err
	}
	o.GPUs = targets
	rep, err := Image(ctx, img, o)
	if err != nil {
		return nil, nil, err
	}
	var violations []Violation
	if rules != nil {
		violations = rules.Check(rep)
	}
	return rep, violations, nil
}
