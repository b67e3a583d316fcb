package testdaemon

import (
	"bytes"
	"os"
	"os/exec"
	"testing"
)

// KILN_CRICTL_BIN names crictl; without it the tests use the newest one
// scripts/crictl.sh built under KILN_CRICTL_CACHE (default
// /var/cache/kiln-crictl/VERSION/).
const envCrictlBin = "KILN_CRICTL_BIN"

// Containerd2Bin finds a containerd 2.x for the tests that need what only
// 2.x has (the transfer service, CRI image volumes): KILN_CONTAINERD_BIN
// when set, else the newest scripts/containerd2.sh built under
// KILN_CONTAINERD_CACHE (default /var/cache/kiln-containerd/vX.Y.Z/). It
// skips t (or fails it when a require variable is 1) when there is none.
// Set KILN_CONTAINERD_BIN to the result (t.Setenv) for StartContainerd to
// run it with its own shim.
func Containerd2Bin(t testing.TB, opts ...Option) string {
	t.Helper()
	c := newConfig("KILN_REQUIRE_CONTAINERD", opts)
	if p := os.Getenv(envContainerdBin); p != "" {
		p = c.lookup(t, p)
		if majorVersion(t, p) < 2 {
			c.skip(t, envContainerdBin+"="+p+" is not containerd 2.x")
		}
		return p
	}
	if os.Geteuid() != 0 {
		c.skip(t, "containerd tests need root")
	}
	return c.newestBuilt(t, "KILN_CONTAINERD_CACHE", "/var/cache/kiln-containerd", "v2.*/containerd", "scripts/containerd2.sh", envContainerdBin)
}

// CrictlBin finds crictl (KILN_CRICTL_BIN, else the newest
// scripts/crictl.sh built), skipping t (or failing it when a require
// variable is 1) when there is none.
func CrictlBin(t testing.TB, opts ...Option) string {
	t.Helper()
	c := newConfig("KILN_REQUIRE_CONTAINERD", opts)
	if p := os.Getenv(envCrictlBin); p != "" {
		return c.lookup(t, p)
	}
	return c.newestBuilt(t, "KILN_CRICTL_CACHE", "/var/cache/kiln-crictl", "*/crictl", "scripts/crictl.sh", envCrictlBin)
}

// Crictl runs crictl (the kubelet's view: the CRI API, not containerd's
// own) against cd's socket and returns stdout, followed by stderr when it
// fails. cd must have been started with EnableCRI.
func (cd *Containerd) Crictl(t testing.TB, crictl string, args ...string) (string, error) {
	t.Helper()
	ep := "unix://" + cd.Socket
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(crictl, append([]string{"--runtime-endpoint", ep, "--image-endpoint", ep, "--timeout", "60s"}, args...)...)
	// No crictl.yaml of the machine's: every setting is on the command line.
	cmd.Env = append(os.Environ(), "CRI_CONFIG_FILE=/dev/null")
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if err != nil {
		stdout.Write(stderr.Bytes())
	}
	return stdout.String(), err
}
