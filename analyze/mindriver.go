package analyze

import "fmt"

// MinDriverFor is replaced by the recipes compatibility database.
var MinDriverFor = func(cuda string) (*MinDriver, error) {
	return nil, fmt.Errorf("no driver data for CUDA %s", cuda)
}
