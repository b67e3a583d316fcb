package warm

import (
	"context"
	"fmt"
)

func openDocker(ctx context.Context, addr string, o TargetOptions) (Target, error) {
	return nil, fmt.Errorf("target docker:%s: not implemented yet", addr)
}
