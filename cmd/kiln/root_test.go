package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/moby/buildkit/client"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/kiln-build/kiln/builder"
	"github.com/kiln-build/kiln/cmd/kiln/internal/cmdutil"
	"github.com/kiln-build/kiln/cmd/kiln/internal/verbkit"
	"github.com/kiln-build/kiln/internal/testkit"
	"github.com/kiln-build/kiln/registry"
	"github.com/kiln-build/kiln/warm"
	"github.com/kiln-build/kiln/warm/targets"
)

// kiln runs kiln ARGS... as the binary does, every verb wired.
func kiln(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := Main(context.Background(), args, strings.NewReader(""), &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestVersionAndCompletion(t *testing.T) {
	code, out, _ := kiln(t, "version")
	if code != 0 || !strings.HasPrefix(out, "kiln ") || !strings.Contains(out, "  go      "+runtime.Version()) {
		t.Errorf("version: %d %q", code, out)
	}
	// kiln --version prints the same, as every peer's --version does.
	if code, out2, errOut := kiln(t, "--version"); code != 0 || out2 != out {
		t.Errorf("--version: exit %d, %q (want %q) %s", code, out2, out, errOut)
	}
	code, js, _ := kiln(t, "version", "--json")
	var v struct{ Schema, Version, Go string }
	if err := json.Unmarshal([]byte(js), &v); code != 0 || err != nil || v.Schema != "kiln.version/v1" || v.Version == "" || v.Go != runtime.Version() {
		t.Errorf("version --json: exit %d, %v, %s", code, err, js)
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

// The Factory's dependencies are made when a verb first needs them, not
// when the verbs are built: help, version and a usage error connect to
// nothing and read no registry configuration; the registry options are
// made once however often they are asked for.
func TestFactoryDependenciesAreLazy(t *testing.T) {
	var out, errOut bytes.Buffer
	ios := &cmdutil.IO{In: strings.NewReader(""), Out: &out, ErrOut: &errOut}
	f := verbkit.New(ios, buildInfo(), nil)
	made := 0
	f.Registry = sync.OnceValues(func() ([]registry.Option, error) { made++; return nil, nil })
	f.BuildKit = func(context.Context, string, builder.TLS) (*client.Client, string, error) {
		t.Error("BuildKit dialled")
		return nil, "", errors.New("no")
	}
	f.OpenTarget = func(context.Context, warm.TargetSpec, targets.Options) (warm.Target, error) {
		t.Error("a warm target opened")
		return nil, errors.New("no")
	}
	for _, args := range [][]string{{"version"}, {"slim", "--help"}, {"warm", "--help"}, {"build", "--help"}, {"slim"}, {"analyze", "a", "b"}} {
		cmdutil.Execute(context.Background(), verbkit.NewRoot(f, verbs...), args, ios)
	}
	if made != 0 {
		t.Fatalf("registry options made %d times by verbs that read no image", made)
	}
	fl := f.ImageFlags()
	fl.Platform = "linux/amd64"
	for range 3 {
		if _, err := fl.LayersOptions(); err != nil {
			t.Fatal(err)
		}
	}
	if made != 1 {
		t.Fatalf("registry options made %d times, want once", made)
	}
}

// A mistyped subcommand at any level exits 2 with the nearest name (kiln
// weights pul printed the group's help and exited 0); a mistyped flag
// names the nearest flag; a group alone still prints its help.
func TestDidYouMean(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"weights", "pul", "x"}, 2, `unknown command "pul" for "kiln weights"; did you mean "pull"?`},
		{[]string{"host", "chek"}, 2, `did you mean "check"?`},
		{[]string{"warm", "--targt", "oci:x", "ubuntu"}, 2, "unknown flag: --targt; did you mean --target?"},
		{[]string{"analyze", "--zzzzzz", "x"}, 2, "kiln analyze --help lists the flags"},
		{[]string{"weights"}, 0, ""},
	} {
		code, _, errOut := kiln(t, tc.args...)
		if code != tc.code || !strings.Contains(errOut, tc.want) {
			t.Errorf("kiln %s: exit %d, stderr %q; want %d and %q", strings.Join(tc.args, " "), code, errOut, tc.code, tc.want)
		}
	}
}

// One exit code per mistake (issue 36 item 5): a malformed reference is a
// usage error from weights pull and run-args too (exit 2, as from every
// verb; they said 1); a verb that printed its own report says in --json's
// "error" why it failed, not "failed".
func TestExitCodesAndErrorWords(t *testing.T) {
	for _, args := range [][]string{
		{"weights", "pull", "INVALID::ref", "--into", t.TempDir()},
		{"weights", "run-args", "INVALID::ref", "--volume", "w"},
	} {
		if code, _, errOut := kiln(t, args...); code != 2 || !strings.Contains(errOut, "lower case") {
			t.Errorf("kiln %s: exit %d %s", strings.Join(args, " "), code, errOut)
		}
	}
	code, out, _ := kiln(t, "compat", "driver", "--cuda", "99.9", "--driver", "550.54", "--json")
	var rep struct{ Error string }
	if code != 1 || json.Unmarshal([]byte(out), &rep) != nil || !strings.Contains(rep.Error, "not in kiln's driver table") {
		t.Errorf("compat driver --json: exit %d, %s", code, out)
	}
}

// TestHelpFitsEightyColumns: every command's --help, on a pipe, fits 80
// columns (it had 180 lines wider: flag usages, examples, summaries) and
// says everything it said before: the description and every summary
// word for word, every flag.
func TestHelpFitsEightyColumns(t *testing.T) {
	f := verbkit.New(&cmdutil.IO{}, cmdutil.BuildInfo{Version: "test"}, run)
	var walk func(c *cobra.Command)
	var n int
	walk = func(c *cobra.Command) {
		if c.Hidden {
			return
		}
		n++
		path := strings.Fields(c.CommandPath())[1:]
		code, out, errOut := kiln(t, append(path, "--help")...)
		if code != 0 {
			t.Fatalf("%s --help: exit %d %s", c.CommandPath(), code, errOut)
		}
		for _, l := range strings.Split(out, "\n") {
			if !testkit.Fits(l, 80) {
				t.Errorf("%s --help: %d columns: %q", c.CommandPath(), len(l), l)
			}
		}
		flat := testkit.Flat(out)
		text := c.Long
		if text == "" {
			text = c.Short
		}
		if !strings.Contains(flat, testkit.Flat(text)) {
			t.Errorf("%s --help lost words of its description", c.CommandPath())
		}
		for _, sub := range c.Commands() {
			if sub.IsAvailableCommand() && !strings.Contains(flat, testkit.Flat(sub.Name()+" "+sub.Short)) {
				t.Errorf("%s --help: no %q", c.CommandPath(), sub.Short)
			}
		}
		c.LocalFlags().VisitAll(func(fl *pflag.Flag) {
			if !fl.Hidden && !strings.Contains(out, "--"+fl.Name+" ") && !strings.Contains(out, "--"+fl.Name+"\n") {
				t.Errorf("%s --help: no --%s", c.CommandPath(), fl.Name)
			}
		})
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(verbkit.NewRoot(f, verbs...))
	if n < 25 {
		t.Errorf("walked %d commands", n)
	}
}
