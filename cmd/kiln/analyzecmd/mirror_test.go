package analyzecmd

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kiln-build/kiln/cmd/kiln/internal/cmdutil"
	"github.com/kiln-build/kiln/cmd/kiln/internal/verbkit"
	"github.com/kiln-build/kiln/internal/testimage"
	"github.com/kiln-build/kiln/internal/testkit"
	"github.com/kiln-build/kiln/registry"
)

// noHostMirrors keeps the host's daemon.json and hosts.toml out of a test.
func noHostMirrors(t *testing.T) {
	old := verbkit.MirrorFiles
	verbkit.MirrorFiles = registry.MirrorFiles{}
	t.Cleanup(func() { verbkit.MirrorFiles = old })
}

// A Docker Hub short name is read through $KILN_MIRROR's endpoint (a bare
// ENDPOINT mirrors Docker Hub), said on stderr; a --mirror that does not
// parse is a usage error.
func TestAnalyzeShortNameThroughKilnMirror(t *testing.T) {
	noHostMirrors(t)
	img := testimage.Image(t, testimage.Config{Env: []string{"CUDA_VERSION=12.4.1"}},
		testimage.Layer(t, []testimage.Entry{testimage.Sized("usr/local/cuda/bin/nvcc", 5000)}, "gzip"))
	mirror := testimage.Registry(t)
	testimage.Push(t, mirror+"/acme/app:v1", img)
	t.Setenv(registry.MirrorEnv, mirror)

	code, out, errOut := run(t, "analyze", "acme/app:v1")
	if code != cmdutil.ExitOK || !strings.Contains(out, "/usr/local/cuda/bin/nvcc") {
		t.Fatalf("analyze acme/app:v1: exit %d\n%s\n%s", code, out, errOut)
	}
	if want := "kiln: docker.io/acme/app:v1: read through mirror " + mirror + " ($KILN_MIRROR)"; !strings.Contains(testkit.Flat(errOut), want) {
		t.Errorf("stderr:\n%s\nwant %q", errOut, want)
	}

	code, out, _ = run(t, "analyze", "acme/app:v1", "--json")
	if code != cmdutil.ExitOK || !strings.Contains(out, `"mirror": "`+mirror+`"`) {
		t.Errorf("--json does not name the mirror: exit %d\n%s", code, out)
	}

	// The flag's syntax is the variable's; the flag decides Docker Hub's
	// mirrors over it.
	code, _, errOut = run(t, "analyze", "acme/app:v1", "--mirror", "docker.io="+mirror)
	if code != cmdutil.ExitOK || !strings.Contains(testkit.Flat(errOut), "read through mirror "+mirror+" (--mirror)") {
		t.Errorf("--mirror docker.io=%s: exit %d\n%s", mirror, code, errOut)
	}
	code, _, errOut = run(t, "analyze", "acme/app:v1", "--mirror", "nohost")
	if code != cmdutil.ExitUsage || !strings.Contains(testkit.Flat(errOut), "--mirror") || !strings.Contains(testkit.Flat(errOut), "not a registry host") {
		t.Errorf("--mirror nohost: exit %d\n%s", code, errOut)
	}
	// Unset, Docker's daemon.json registry-mirrors serve Docker Hub.
	t.Setenv(registry.MirrorEnv, "")
	daemon := filepath.Join(t.TempDir(), "daemon.json")
	if err := os.WriteFile(daemon, []byte(`{"registry-mirrors": ["http://`+mirror+`"]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	verbkit.MirrorFiles = registry.MirrorFiles{DockerDaemon: daemon}
	code, _, errOut = run(t, "analyze", "acme/app:v1")
	if code != cmdutil.ExitOK || !strings.Contains(testkit.Flat(errOut), "read through mirror http://"+mirror+" ("+daemon+")") {
		t.Errorf("daemon.json registry-mirrors: exit %d\n%s", code, errOut)
	}
	t.Setenv(registry.MirrorEnv, "ghcr.io=")
	code, _, errOut = run(t, "analyze", "acme/app:v1")
	if code == cmdutil.ExitOK || !strings.Contains(testkit.Flat(errOut), "$KILN_MIRROR") {
		t.Errorf("a bad $KILN_MIRROR: exit %d\n%s", code, errOut)
	}
}
