package cmdutil

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// verb is a --json verb for Execute's tests: run does its work.
func verb(run func(cmd *cobra.Command, ios *IO) error, ios *IO) *cobra.Command {
	root := &cobra.Command{Use: "kiln", SilenceUsage: true, SilenceErrors: true}
	c := &cobra.Command{Use: "thing", RunE: func(cmd *cobra.Command, _ []string) error { return run(cmd, ios) }}
	c.Flags().Bool("json", false, "")
	SetSchema(c, "kiln.thing/v1")
	root.AddCommand(c)
	return root
}

func execute(t *testing.T, ctx context.Context, run func(*cobra.Command, *IO) error, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	ios := &IO{In: strings.NewReader(""), Out: &out, ErrOut: &errOut}
	code := Execute(ctx, verb(run, ios), args, ios)
	return code, out.String(), errOut.String()
}

// TestExecuteJSONFailure: a --json verb that fails before writing anything
// still prints one object (schema, ok false, error, exit_code); one that
// wrote its report gets the failure fields merged into it, the report's
// keys kept in order; the error goes to stderr once.
func TestExecuteJSONFailure(t *testing.T) {
	code, out, errOut := execute(t, context.Background(), func(*cobra.Command, *IO) error {
		return UsageErr("--to: %q is not a reference", "a>b")
	}, "thing", "--json")
	want := "{\n  \"schema\": \"kiln.thing/v1\",\n  \"ok\": false,\n  \"error\": \"--to: \\\"a>b\\\" is not a reference\",\n  \"exit_code\": 2\n}\n"
	if code != ExitUsage || out != want || strings.Count(errOut, "kiln: ") != 1 {
		t.Errorf("exit %d\nstdout %q\nwant   %q\nstderr %q", code, out, want, errOut)
	}

	code, out, _ = execute(t, context.Background(), func(_ *cobra.Command, ios *IO) error {
		b, _ := json.Marshal(map[string]any{"target": "oci:x", "note": "<&>"}) // json.Marshal escapes
		fmt.Fprintln(ios.Out, string(b))
		return SilentExit(ExitNotReady)
	}, "thing", "--json")
	want = "{\n  \"schema\": \"kiln.thing/v1\",\n  \"ok\": false,\n  \"error\": \"not ready: work left to do\",\n  \"exit_code\": 5,\n  \"note\": \"<&>\",\n  \"target\": \"oci:x\"\n}\n"
	if code != ExitNotReady || out != want {
		t.Errorf("exit %d\nstdout %q\nwant   %q", code, out, want)
	}
}

// TestExecuteJSONSuccess: a report gets schema and ok first; a report's
// own schema and ok stay; the old schema_version marker goes.
func TestExecuteJSONSuccess(t *testing.T) {
	_, out, _ := execute(t, context.Background(), func(_ *cobra.Command, ios *IO) error {
		return WriteJSON(ios.Out, map[string]any{"schema_version": 1, "a": `\u003e`})
	}, "thing", "--json")
	if want := "{\n  \"schema\": \"kiln.thing/v1\",\n  \"ok\": true,\n  \"a\": \"\\\\u003e\"\n}\n"; out != want {
		t.Errorf("stdout %q\nwant   %q", out, want)
	}
	_, out, _ = execute(t, context.Background(), func(_ *cobra.Command, ios *IO) error {
		return WriteJSON(ios.Out, map[string]any{"schema": "kiln.other/v2", "ok": false})
	}, "thing", "--json")
	if want := "{\n  \"schema\": \"kiln.other/v2\",\n  \"ok\": false\n}\n"; out != want {
		t.Errorf("stdout %q\nwant   %q", out, want)
	}
	// Without --json nothing is held back or added.
	_, out, _ = execute(t, context.Background(), func(_ *cobra.Command, ios *IO) error {
		fmt.Fprintln(ios.Out, "table")
		return nil
	}, "thing")
	if out != "table\n" {
		t.Errorf("stdout %q", out)
	}
}

// TestExecuteInterrupted: a cancelled context (SIGINT, SIGTERM) exits 130
// whatever the verb returned, printed once, saying whether running the
// same command again resumes (a regression test: it printed "context
// canceled" and exited 1).
func TestExecuteInterrupted(t *testing.T) {
	for _, resumes := range []bool{false, true} {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		code, out, errOut := execute(t, ctx, func(cmd *cobra.Command, _ *IO) error {
			if resumes {
				Resumes(cmd)
			}
			return fmt.Errorf("fetching blob: %w", cmd.Context().Err())
		}, "thing")
		want := "kiln: interrupted\n"
		if resumes {
			want = "kiln: interrupted; the same command resumes\n"
		}
		if code != ExitInterrupted || errOut != want || out != "" {
			t.Errorf("resumes %v: exit %d, stderr %q, want 130 and %q", resumes, code, errOut, want)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, out, _ := execute(t, ctx, func(cmd *cobra.Command, _ *IO) error { return errors.New("context canceled") }, "thing", "--json")
	var obj map[string]any
	if err := json.Unmarshal([]byte(out), &obj); err != nil || obj["exit_code"] != float64(130) || obj["error"] != "interrupted" {
		t.Errorf("--json interrupted: %v %s", err, out)
	}
}

func TestUnescapeHTML(t *testing.T) {
	for in, want := range map[string]string{
		`"a\u003eb"`:     `"a>b"`,
		`"\u003c\u0026"`: `"<&"`,
		`"a\\u003eb"`:    `"a\\u003eb"`, // an escaped backslash, then text
		`"\\\u003e"`:     `"\\>"`,
		`"\u00e9\u2028"`: `"\u00e9\u2028"`,
		`"trailing \\"`:  `"trailing \\"`,
	} {
		if got := string(unescapeHTML([]byte(in))); got != want {
			t.Errorf("unescapeHTML(%s) = %s, want %s", in, got, want)
		}
	}
}

// TestExecuteJSONWithAlias: a deprecated spelling (Alias) under --json
// still gives one object on stdout, the note on stderr (a regression
// test: pflag's own deprecation note went to stdout, before the object,
// so the report passed through unmerged, and a failure printed no object).
func TestExecuteJSONWithAlias(t *testing.T) {
	var out, errOut bytes.Buffer
	ios := &IO{In: strings.NewReader(""), Out: &out, ErrOut: &errOut}
	root := verb(func(*cobra.Command, *IO) error { return errors.New("no such recipe") }, ios)
	thing, _, _ := root.Find([]string{"thing"})
	thing.Flags().Int("jobs", 4, "")
	Alias(thing.Flags(), "concurrency", "jobs")
	root.PersistentPreRun = func(c *cobra.Command, _ []string) { warnAliases(c) }
	code := Execute(context.Background(), root, []string{"thing", "--concurrency", "2", "--json"}, ios)
	want := "{\n  \"schema\": \"kiln.thing/v1\",\n  \"ok\": false,\n  \"error\": \"no such recipe\",\n  \"exit_code\": 1\n}\n"
	if code != ExitFailure || out.String() != want || !strings.Contains(errOut.String(), "kiln: --concurrency is deprecated, use --jobs") {
		t.Errorf("exit %d\nstdout %q\nwant   %q\nstderr %q", code, out.String(), want, errOut.String())
	}
}
