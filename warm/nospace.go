package warm

import (
	"errors"
	"strings"
	"syscall"
)

// errNoSpaceSys marks a write that failed because the disk is full.
var errNoSpaceSys = errors.New("no space left on device")

func isNoSpace(err error) bool {
	// containerd reports ENOSPC through gRPC as text.
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) || strings.Contains(err.Error(), "no space left on device")
}
