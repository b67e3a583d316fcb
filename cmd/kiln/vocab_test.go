package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/kiln-build/kiln/cmd/kiln/internal/cmdutil"
)

// TestExitCodesSameMistake runs every verb with the same mistakes and
// checks each gives the same code: a malformed reference is a usage error
// (2) everywhere (a regression test: analyze exited 1, warm 2), an image
// that is not there a failure (1), an unknown flag 2.
func TestExitCodesSameMistake(t *testing.T) {
	dir := t.TempDir()
	src := contractImage(t, dir)
	p := func(s string) string { return filepath.Join(dir, s) }
	bad := "BAD::ref"
	for _, tc := range []struct {
		args []string
		code int
	}{
		{[]string{"analyze", bad}, cmdutil.ExitUsage},
		{[]string{"slim", bad, "--to", "oci:" + p("a")}, cmdutil.ExitUsage},
		{[]string{"slim", src, "--to", bad}, cmdutil.ExitUsage},
		{[]string{"convert", bad, "--to", "oci:" + p("a")}, cmdutil.ExitUsage},
		{[]string{"convert", src, "--to", bad}, cmdutil.ExitUsage},
		{[]string{"weights", "strip", bad, "--to", "oci:" + p("a"), "--weights-to", "oci:" + p("b")}, cmdutil.ExitUsage},
		{[]string{"weights", "strip", src, "--to", bad, "--weights-to", "oci:" + p("b")}, cmdutil.ExitUsage},
		{[]string{"warm", bad, "--target", "oci:" + p("t")}, cmdutil.ExitUsage},
		{[]string{"sign", bad, "--key", p("k")}, cmdutil.ExitUsage},
		{[]string{"verify", bad, "--key", "../../testdata/hostcheck/hosts/h100-535.json"}, cmdutil.ExitUsage},
		{[]string{"host", "check", "--host-info", "../../testdata/hostcheck/hosts/h100-535.json", "--image", bad}, cmdutil.ExitUsage},

		{[]string{"analyze", "oci:" + p("none")}, cmdutil.ExitFailure},
		{[]string{"slim", "oci:" + p("none"), "--to", "oci:" + p("a")}, cmdutil.ExitFailure},
		{[]string{"convert", "oci:" + p("none"), "--to", "oci:" + p("a")}, cmdutil.ExitFailure},
		{[]string{"weights", "strip", "oci:" + p("none"), "--to", "oci:" + p("a"), "--weights-to", "oci:" + p("b")}, cmdutil.ExitFailure},
		{[]string{"warm", "oci:" + p("none"), "--target", "oci:" + p("t")}, cmdutil.ExitFailure},
	} {
		code, _, errOut := kiln(t, append(tc.args, "--progress", "none")...)
		if tc.args[0] == "sign" || tc.args[0] == "verify" || tc.args[0] == "host" {
			code, _, errOut = kiln(t, tc.args...)
		}
		if code != tc.code {
			t.Errorf("%v: exit %d, want %d\n%s", tc.args, code, tc.code, errOut)
		}
		if strings.Count(errOut, "kiln: ") != 1 {
			t.Errorf("%v: the error is not printed exactly once:\n%s", tc.args, errOut)
		}
	}
	// An unknown flag is a usage error from every command.
	walk(newTestRoot(), func(c *cobra.Command) {
		if c.Runnable() && c.Name() != "help" && c.Parent() != nil && c.Parent().Name() != "completion" {
			path := strings.Fields(c.CommandPath())[1:]
			if code, _, _ := kiln(t, append(path, "--no-such-flag")...); code != cmdutil.ExitUsage {
				t.Errorf("%s --no-such-flag: exit %d, want 2", c.CommandPath(), code)
			}
		}
	})
}

// TestFlagVocabulary walks every command's flags and holds them to one
// vocabulary (a regression test: --progress took different words per
// verb, -j/--concurrency meant opposite things in warm and weights pull,
// convert's scratch directory was --tmp, build wrote images to --output).
func TestFlagVocabulary(t *testing.T) {
	walk(newTestRoot(), func(c *cobra.Command) {
		c.LocalFlags().VisitAll(func(f *pflag.Flag) {
			where := c.CommandPath() + " --" + f.Name
			if f.Hidden {
				note := cmdutil.AliasNote(f)
				if note == "" {
					return
				}
				if !strings.HasPrefix(note, "use --") {
					t.Errorf("%s: hidden alias without a note naming its new spelling", where)
				}
				return
			}
			switch f.Name {
			case "progress":
				if f.Usage != cmdutil.ProgressUsage || f.DefValue != "auto" {
					t.Errorf("%s: usage %q (default %s), want cmdutil.ProgressFlag's", where, f.Usage, f.DefValue)
				}
			case "tmp", "concurrency", "temp-dir", "scratch":
				t.Errorf("%s: visible; the vocabulary has --work-dir and -j/--jobs", where)
			case "jobs":
				if f.Shorthand != "j" {
					t.Errorf("%s: no -j", where)
				}
			case "output":
				if strings.Contains(f.Usage, "oci:") {
					t.Errorf("%s: an image destination; that is --to (--output is a file kiln writes)", where)
				}
			}
			if f.Shorthand == "j" && f.Name != "jobs" {
				t.Errorf("%s: -j is --jobs everywhere", where)
			}
			if strings.Contains(f.Usage, "scratch") && f.Name != "work-dir" {
				t.Errorf("%s: a scratch directory is --work-dir", where)
			}
		})
	})
	// The old spellings still work, and say what to write now.
	dir := t.TempDir()
	src := contractImage(t, dir)
	_, _, errOut := kiln(t, "convert", src, "--to", "oci:"+filepath.Join(dir, "c"), "--tmp", dir, "--progress", "quiet")
	if !strings.Contains(errOut, "kiln: --tmp is deprecated, use --work-dir\n") {
		t.Errorf("convert --tmp: %s", errOut)
	}
	code, _, errOut := kiln(t, "warm", src, "--target", "oci:"+filepath.Join(dir, "t"), "--concurrency", "2", "--progress", "bars")
	if code != 0 || !strings.Contains(errOut, "kiln: --concurrency is deprecated, use --jobs\n") {
		t.Errorf("warm --concurrency: exit %d %s", code, errOut)
	}
}

// TestInterruptedResumes: Ctrl-C (a cancelled context) in a verb that
// resumes exits 130 and says so, once (a regression test: it printed
// "context canceled" twice and exited 1).
func TestInterruptedResumes(t *testing.T) {
	dir := t.TempDir()
	src := contractImage(t, dir)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var out, errOut strings.Builder
	code := Main(ctx, []string{"warm", src, "--target", "oci:" + filepath.Join(dir, "t"), "--progress", "none"}, strings.NewReader(""), &out, &errOut)
	if code != cmdutil.ExitInterrupted || errOut.String() != "kiln: interrupted; the same command resumes\n" || strings.Contains(out.String(), "canceled") {
		t.Errorf("exit %d, stderr %q, stdout %q", code, errOut.String(), out.String())
	}
}

// TestVerifyKeyNamesItsFlag: kiln verify's errors name its flag, --key
// (a regression test: they named warm's --verify-key).
func TestVerifyKeyNamesItsFlag(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "cosign.pub")
	code, _, errOut := kiln(t, "verify", "127.0.0.1:1/a:b", "--key", missing)
	if code != cmdutil.ExitUsage || !strings.Contains(errOut, "--key "+missing) || strings.Contains(errOut, "--verify-key") {
		t.Errorf("exit %d: %s", code, errOut)
	}
}

// TestLockCheckWithoutLock: kiln lock --check with no lock file says there
// is none and how to write one, without resolving anything (a regression
// test: it said "stale").
func TestLockCheckWithoutLock(t *testing.T) {
	dir := t.TempDir()
	b, err := os.ReadFile("../../testdata/recipes/torch25-cu124.yaml")
	if err != nil {
		t.Fatal(err)
	}
	recipe := filepath.Join(dir, "kiln.yaml")
	if err := os.WriteFile(recipe, b, 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, errOut := kiln(t, "lock", "--check", recipe)
	want := "kiln: no lock file " + filepath.Join(dir, "kiln.lock") + " to check; write one with: kiln lock " + recipe + "\n"
	if code != cmdutil.ExitFailure || errOut != want {
		t.Errorf("exit %d\nstderr %q\nwant   %q", code, errOut, want)
	}
}

// TestWarmHostsMissingJSON: kiln warm --hosts FILE --json with no such
// file prints one JSON object (a regression test: it printed nothing).
func TestWarmHostsMissingJSON(t *testing.T) {
	code, out, _ := kiln(t, "warm", "127.0.0.1:5000/a:b", "--hosts", filepath.Join(t.TempDir(), "missing.yaml"), "--json")
	if code != cmdutil.ExitUsage || !strings.Contains(out, `"schema": "kiln.warm/v1"`) || !strings.Contains(out, `"exit_code": 2`) || !strings.Contains(out, "missing.yaml") {
		t.Errorf("exit %d: %s", code, out)
	}
}
