package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/kiln-build/kiln/cmd/kiln/internal/cmdutil"
)

// kiln runs kiln ARGS... as the binary does, every verb wired.
func kiln(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := Main(context.Background(), args, strings.NewReader(""), &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestVersionAndCompletion(t *testing.T) {
	if code, out, _ := kiln(t, "version"); code != 0 || !strings.HasPrefix(out, "kiln ") {
		t.Errorf("version: %d %q", code, out)
	}
	if code, out, _ := kiln(t, "completion", "bash"); code != 0 || !strings.Contains(out, "bash completion") {
		t.Errorf("completion: %d", code)
	}
}

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
		code, _, errOut := kiln(t, append(args, "--progress", "fancy")...)
		if code != cmdutil.ExitUsage || !strings.Contains(errOut, `--progress: "fancy" is not one of`) {
			t.Errorf("%v --progress fancy: exit %d, %s", args, code, errOut)
		}
	}
	for _, m := range []string{"auto", "tty", "bars", "plain", "none"} {
		if err := cmdutil.CheckProgress(m); err != nil {
			t.Errorf("cmdutil.CheckProgress(%q) = %v", m, err)
		}
	}
}
