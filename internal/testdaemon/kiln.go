package testdaemon

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

type builtKiln struct {
	once sync.Once
	dir  string
	bin  string
	err  error
}

// kiln is KilnBinary's build, kilnCgo KilnBinaryGoInstall's.
var kiln, kilnCgo builtKiln

// KilnBinary is the kiln CLI built from this checkout, once per test
// binary however many tests ask: statically linked (CGO_ENABLED=0) and
// -trimpath, as make build makes it, so that it also runs inside images
// and on other hosts (slim's probe, the build's GPU-code pruning, fleet's
// hosts). A package that calls it removes it at the end with
// RemoveKilnBinary in its TestMain.
func KilnBinary(t testing.TB) string {
	t.Helper()
	return kiln.build(t, "CGO_ENABLED=0", "-trimpath")
}

// KilnBinaryGoInstall is the kiln CLI as the README's Install section
// gives it to a user (go install, cgo on where a C compiler is): on this
// machine, which has one, dynamically linked against the host's C library
// (cgo's resolver). Removed by RemoveKilnBinary too.
func KilnBinaryGoInstall(t testing.TB) string {
	t.Helper()
	return kilnCgo.build(t, "CGO_ENABLED=1")
}

func (k *builtKiln) build(t testing.TB, env string, flags ...string) string {
	t.Helper()
	k.once.Do(func() {
		k.dir, k.err = os.MkdirTemp("", "kiln-test-bin-")
		if k.err != nil {
			return
		}
		bin := filepath.Join(k.dir, "kiln")
		args := append(append([]string{"build"}, flags...), "-o", bin, "github.com/kiln-build/kiln/cmd/kiln")
		cmd := exec.Command("go", args...)
		cmd.Env = append(os.Environ(), env)
		if out, err := cmd.CombinedOutput(); err != nil {
			k.err = fmt.Errorf("%s go build ./cmd/kiln: %v\n%s", env, err, out)
			return
		}
		k.bin = bin
	})
	if k.err != nil {
		t.Fatal(k.err)
	}
	return k.bin
}

// RemoveKilnBinary removes what KilnBinary built (nothing when no test
// asked for it); a TestMain calls it after m.Run.
func RemoveKilnBinary() {
	for _, k := range []*builtKiln{&kiln, &kilnCgo} {
		if k.dir != "" {
			os.RemoveAll(k.dir)
		}
	}
}
