package targets_test

import (
	"context"
	"strings"
	"testing"

	"github.com/kiln-build/kiln/internal/testdaemon"
	"github.com/kiln-build/kiln/warm"
	"github.com/kiln-build/kiln/warm/targets"
)

// Issue 25 item 6: a containerd or Docker socket this user may not use
// says what to do (root, the docker group, the socket's path), not a gRPC
// transport error.
func TestTargetSocketPermissionInWords(t *testing.T) {
	for _, c := range []struct {
		kind string
		want []string
	}{
		{"containerd", []string{"permission denied on containerd's socket", "run kiln as root"}},
		{"docker", []string{"permission denied on dockerd's socket", "docker group", "run kiln as root"}},
	} {
		sock := testdaemon.DeniedSocket(t, c.kind+".sock")
		stage := t.TempDir()
		var err error
		testdaemon.AsSocketStranger(t, func() {
			var tgt warm.Target
			tgt, err = targets.Open(context.Background(), warm.TargetSpec{Kind: c.kind, Addr: sock}, targets.Options{DockerStage: stage})
			if err == nil {
				tgt.Close()
			}
		})
		if err == nil {
			t.Fatalf("%s: opened a socket this user may not use", c.kind)
		}
		for _, w := range append(c.want, c.kind+":"+sock) {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error lacks %q:\n%v", c.kind, w, err)
			}
		}
		if strings.Contains(err.Error(), "rpc error") || strings.Contains(err.Error(), "dial unix") {
			t.Errorf("%s: error shows the transport: %v", c.kind, err)
		}
	}
}
