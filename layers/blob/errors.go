package blob

import (
	"errors"
	"strings"
	"syscall"
)

// ErrAlreadyExists is returned by an Ingester or by Commit when the blob
// is already committed (another writer won the race): the blob is
// present, and nothing needs writing.
var ErrAlreadyExists = errors.New("blob already exists")

// IsNoSpace says whether err is a full disk or quota: retrying cannot
// help, and what this run staged should be given back.
func IsNoSpace(err error) bool {
	if err == nil {
		return false
	}
	// containerd reports ENOSPC through gRPC as text.
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) || strings.Contains(err.Error(), "no space left on device")
}
