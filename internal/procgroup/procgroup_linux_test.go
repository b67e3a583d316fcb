package procgroup

import (
	"context"
	"syscall"
	"testing"
)

// TestCommandDiesWithKiln: a helper leads its own process group (the
// context's end kills all of it) and is SIGKILLed when kiln dies (issue
// 34: a mkfs.erofs that outlived a killed kiln).
func TestCommandDiesWithKiln(t *testing.T) {
	a := Command(context.Background(), "true").SysProcAttr
	if !a.Setpgid || a.Pdeathsig != syscall.SIGKILL {
		t.Fatalf("SysProcAttr %+v: want Setpgid and Pdeathsig SIGKILL", a)
	}
}
