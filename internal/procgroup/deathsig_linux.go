package procgroup

import "syscall"

// dieWithParent has the kernel SIGKILL the program when kiln dies. (The
// signal follows the thread that started it; Go's runtime ends threads
// only under LockOSThread, which kiln's callers do not use.)
func dieWithParent(a *syscall.SysProcAttr) { a.Pdeathsig = syscall.SIGKILL }
