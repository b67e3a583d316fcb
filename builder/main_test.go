package builder

import (
	"os"
	"testing"

	"github.com/kiln-build/kiln/internal/testdaemon"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testdaemon.RemoveKilnBinary()
	os.Exit(code)
}
