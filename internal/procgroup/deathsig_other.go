//go:build !linux

package procgroup

import "syscall"

// dieWithParent is Linux's alone: elsewhere the context ends the group.
func dieWithParent(*syscall.SysProcAttr) {}
