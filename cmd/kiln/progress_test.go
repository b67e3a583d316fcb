package main

import (
	"strings"
	"testing"
)

// TestProgressFlag: every verb with --progress refuses a value it does not
// know with a usage error (exit 2) naming the flag, before doing any work.
func TestProgressFlag(t *testing.T) {
	dir := t.TempDir()
	for _, args := range [][]string{
		{"analyze", "oci:" + dir},
		{"slim", "oci:" + dir, "--to", "oci:" + dir + "/out"},
		{"convert", "oci:" + dir, "--to", "oci:" + dir + "/out"},
		{"warm", "oci:" + dir, "--target", "oci:" + dir + "/t"},
		{"weights", "strip", "oci:" + dir, "--to", "oci:" + dir + "/a", "--weights-to", "oci:" + dir + "/w"},
		{"weights", "pull", "oci:" + dir, "--into", dir + "/v"},
		{"host", "check"},
	} {
		code, _, errOut := run(t, append(args, "--progress", "fancy")...)
		if code != ExitUsage || !strings.Contains(errOut, `--progress: "fancy" is not one of`) {
			t.Errorf("%v --progress fancy: exit %d, %s", args, code, errOut)
		}
	}
	for _, m := range []string{"auto", "tty", "bars", "plain", "none"} {
		if err := checkProgress(m); err != nil {
			t.Errorf("checkProgress(%q) = %v", m, err)
		}
	}
}
