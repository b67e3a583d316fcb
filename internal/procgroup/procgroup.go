// Package procgroup runs helper programs (credential helpers, nvidia-smi)
// so that a cancelled context ends them and everything they started.
package procgroup

import (
	"context"
	"os/exec"
	"syscall"
	"time"
)

// waitDelay bounds how long Wait waits for the output pipes after the
// group is killed (a child that escaped the group may hold them open).
const waitDelay = time.Second

// Command is exec.CommandContext, with the program leading a process
// group of its own, and the context's end killing that whole group: a
// helper's children (a login flow, a cloud CLI, a hung driver query) are
// not left running, and Wait returns. On Linux the program is also killed
// when kiln dies without ending it (SIGKILL, say): Pdeathsig.
func Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	dieWithParent(cmd.SysProcAttr)
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = waitDelay
	return cmd
}
