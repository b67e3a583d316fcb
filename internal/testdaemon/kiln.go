package testdaemon

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

var kiln struct {
	once sync.Once
	dir  string
	bin  string
	err  error
}

// KilnBinary is the kiln CLI built from this checkout, once per test
// binary however many tests ask: statically linked (CGO_ENABLED=0) and
// -trimpath, as make build makes it, so that it also runs inside images
// and on other hosts (slim's probe, the build's GPU-code pruning, fleet's
// hosts). A package that calls it removes it at the end with
// RemoveKilnBinary in its TestMain.
func KilnBinary(t testing.TB) string {
	t.Helper()
	kiln.once.Do(func() {
		kiln.dir, kiln.err = os.MkdirTemp("", "kiln-test-bin-")
		if kiln.err != nil {
			return
		}
		bin := filepath.Join(kiln.dir, "kiln")
		cmd := exec.Command("go", "build", "-trimpath", "-o", bin, "github.com/kiln-build/kiln/cmd/kiln")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			kiln.err = fmt.Errorf("go build ./cmd/kiln: %v\n%s", err, out)
			return
		}
		kiln.bin = bin
	})
	if kiln.err != nil {
		t.Fatal(kiln.err)
	}
	return kiln.bin
}

// RemoveKilnBinary removes what KilnBinary built (nothing when no test
// asked for it); a TestMain calls it after m.Run.
func RemoveKilnBinary() {
	if kiln.dir != "" {
		os.RemoveAll(kiln.dir)
	}
}
