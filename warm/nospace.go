package warm

import (
	"errors"

	"github.com/kiln-build/kiln/layers/blob"
)

// errNoSpaceSys marks a write that failed because the disk is full.
var errNoSpaceSys = errors.New("no space left on device")

func isNoSpace(err error) bool { return blob.IsNoSpace(err) }
