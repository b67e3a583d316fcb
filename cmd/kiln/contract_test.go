package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/spf13/cobra"

	"github.com/kiln-build/kiln/cmd/kiln/internal/cmdtest"
	"github.com/kiln-build/kiln/cmd/kiln/internal/cmdutil"
	"github.com/kiln-build/kiln/cmd/kiln/internal/verbkit"
	"github.com/kiln-build/kiln/internal/termtable"
	"github.com/kiln-build/kiln/internal/testimage"
	"github.com/kiln-build/kiln/internal/testkit"
)

// contractImage writes a small app image (a binary, an app file, two
// weight files) as the OCI layout DIR/src, tag app, and returns its ref.
func contractImage(t *testing.T, dir string) string {
	t.Helper()
	img := testimage.Image(t, testimage.Config{Env: []string{"PATH=/usr/bin"}},
		testimage.Layer(t, []testimage.Entry{testimage.Sized("usr/bin/python3", 3000)}, "gzip"),
		testimage.Layer(t, []testimage.Entry{testimage.File("app/serve.py", []byte("print('a<b>&c')\n")),
			testimage.Safetensors("app/models/m-00001.safetensors", 1<<20), testimage.Safetensors("app/models/m-00002.safetensors", 5000)}, "gzip"))
	testimage.WriteLayout(t, filepath.Join(dir, "src"), "app", img)
	return "oci:" + filepath.Join(dir, "src") + ":app"
}

// schemas compiles docs/schema/*.json, each under its schema name
// ("kiln.analyze/v1" is docs/schema/kiln.analyze.v1.json).
func schemas(t *testing.T) func(name string) *jsonschema.Schema {
	t.Helper()
	c := jsonschema.NewCompiler()
	files, err := filepath.Glob("../../docs/schema/*.json")
	if err != nil || len(files) == 0 {
		t.Fatalf("no schema files in docs/schema: %v", err)
	}
	for _, f := range files {
		abs, _ := filepath.Abs(f)
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if err := c.AddResource("file://"+abs, doc); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
	}
	return func(name string) *jsonschema.Schema {
		f, _ := filepath.Abs("../../docs/schema/" + strings.ReplaceAll(name, "/", ".") + ".json")
		s, err := c.Compile("file://" + f)
		if err != nil {
			t.Fatalf("schema %s: %v", name, err)
		}
		return s
	}
}

var snake = regexp.MustCompile(`^[a-z][a-z0-9_]*$`)

// checkContract holds one --json run to kiln's output contract: exactly
// one object on stdout, schema/ok first, error and exit_code on failure
// (exit_code the process's), snake_case keys at the top, no \u003e
// escapes, valid against its schema file. It returns the object.
func checkContract(t *testing.T, schema func(string) *jsonschema.Schema, args []string, code int, out string) map[string]any {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(out))
	var obj map[string]any
	if err := dec.Decode(&obj); err != nil {
		t.Errorf("%v: stdout is not one JSON object (exit %d): %v\n%s", args, code, err, out)
		return nil
	}
	if dec.More() {
		t.Errorf("%v: more than one JSON value on stdout:\n%s", args, out)
	}
	if strings.Contains(out, `\u003`) || strings.Contains(out, `\u0026`) {
		t.Errorf("%v: HTML-escaped output:\n%s", args, out)
	}
	name, _ := obj["schema"].(string)
	if !regexp.MustCompile(`^kiln\.[a-z-]+/v[0-9]+$`).MatchString(name) {
		t.Errorf("%v: schema %q, want kiln.VERB/vN", args, name)
		return obj
	}
	if !strings.HasPrefix(strings.TrimSpace(out), "{\n  \"schema\"") {
		t.Errorf("%v: \"schema\" is not the first key:\n%.200s", args, out)
	}
	ok, _ := obj["ok"].(bool)
	if ok != (code == 0) {
		t.Errorf("%v: ok %v with exit %d", args, obj["ok"], code)
	}
	if code != 0 {
		if ec, _ := obj["exit_code"].(float64); int(ec) != code {
			t.Errorf("%v: exit_code %v, the process exited %d", args, obj["exit_code"], code)
		}
		if msg, _ := obj["error"].(string); msg == "" {
			t.Errorf("%v: failure without an error message:\n%s", args, out)
		}
	}
	for k := range obj {
		if !snake.MatchString(k) {
			t.Errorf("%v: key %q is not snake_case", args, k)
		}
	}
	var inst any
	_ = json.Unmarshal([]byte(out), &inst)
	if err := schema(name).Validate(inst); err != nil {
		t.Errorf("%v: does not validate against %s: %v\n%.2000s", args, name, err, out)
	}
	return obj
}

// verbRun is a run of kiln with args and the exit code it must give.
type verbRun struct {
	args []string
	code int
}

// verbRuns are runs of every verb, on success (or a verdict) and on
// failure, on inputs made in t's directory and an in-process registry.
func verbRuns(t *testing.T) []verbRun {
	// A short directory, as a person's paths are (t.TempDir's names the
	// test: 60 columns of every line that quotes a path).
	dir, err := os.MkdirTemp("", "k")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	src := contractImage(t, dir)
	keys := cmdtest.NewKeys(t)
	hosts := filepath.Join(dir, "hosts.yaml")
	if err := os.WriteFile(filepath.Join(dir, "logs.txt"), []byte(""), 0o644); err != nil {
		t.Fatal(err)
	}
	p := func(s string) string { return filepath.Join(dir, s) }
	reg := testimage.Registry(t)
	pushed := reg + "/acme/serve:1"
	testimage.Push(t, pushed, testimage.Image(t, testimage.Config{}, testimage.Layer(t, []testimage.Entry{testimage.Sized("a", 100)}, "gzip")))
	return []verbRun{
		// success (or a verdict) from each verb
		{[]string{"analyze", src}, 0},
		{[]string{"analyze", src, "--against", pushed}, 0},
		{[]string{"analyze", src, "--against", "oci:" + p("nothing")}, cmdutil.ExitFailure},
		{[]string{"slim", src, "--to", "oci:" + p("slim")}, 0},
		{[]string{"convert", src, "--to", "oci:" + p("conv")}, 0},
		{[]string{"weights", "strip", src, "--to", "oci:" + p("ws"), "--weights-to", "oci:" + p("w")}, 0},
		{[]string{"weights", "pull", "oci:" + p("w"), "--into", p("vol")}, 0},
		{[]string{"weights", "verify", p("vol")}, 0},
		{[]string{"weights", "run-args", "oci:" + p("w"), "--volume", "models", "--pull-ref", "reg.example/w@sha256:" + strings.Repeat("a", 64)}, 0},
		{[]string{"warm", src, "--target", "oci:" + p("t")}, 0},
		{[]string{"warm", src, "--target", "oci:" + p("t2"), "--dry-run"}, cmdutil.ExitNotReady},
		{[]string{"recipes", "list"}, 0},
		{[]string{"compat", "driver", "--cuda", "12.4", "--driver", "550.54"}, 0},
		{[]string{"compat", "gpu", "h100", "--cuda", "12.4"}, 0},
		{[]string{"host", "check", "--host-info", "../../testdata/hostcheck/hosts/h100-535.json"}, 0},
		{[]string{"resolve", "../../testdata/recipes/torch25-cu124.yaml"}, 0},
		{[]string{"build", "../../testdata/recipes/torch25-cu124.yaml", "--dry-run"}, 0},
		{[]string{"fatbin", "prune", dir, "--gpus", "h100", "--dry-run"}, 0},
		{[]string{"sign", pushed, "--key", keys.Key}, 0},
		{[]string{"verify", pushed, "--key", keys.Pub}, 0},
		{[]string{"verify", pushed, "--key", keys.OtherPub}, cmdutil.ExitUnverified},
		// failures: each verb prints one object all the same
		{[]string{"analyze", "BAD::ref"}, cmdutil.ExitUsage},
		{[]string{"analyze", "oci:" + p("nothing")}, cmdutil.ExitFailure},
		{[]string{"slim", "oci:" + p("nothing"), "--to", "oci:" + p("s2")}, cmdutil.ExitFailure},
		{[]string{"convert", "oci:" + p("nothing"), "--to", "oci:" + p("c2")}, cmdutil.ExitFailure},
		{[]string{"weights", "strip", "oci:" + p("nothing"), "--to", "oci:" + p("a"), "--weights-to", "oci:" + p("b")}, cmdutil.ExitFailure},
		{[]string{"weights", "pull", "oci:" + p("nothing"), "--into", p("v2")}, cmdutil.ExitFailure},
		{[]string{"weights", "verify", p("nothing")}, cmdutil.ExitFailure},
		{[]string{"weights", "run-args", "oci:" + p("nothing"), "--volume", "m"}, cmdutil.ExitFailure},
		{[]string{"host", "check", "--host-info", p("nothing.json")}, cmdutil.ExitUsage},
		{[]string{"warm", src, "--hosts", hosts}, cmdutil.ExitUsage},
		{[]string{"warm", "status", "--hosts", hosts, src}, cmdutil.ExitUsage},
		{[]string{"warm", "BAD::ref", "--target", "oci:" + p("t3")}, cmdutil.ExitUsage},
		{[]string{"sign", "oci:" + p("nothing"), "--key", keys.Key}, cmdutil.ExitUsage},
		{[]string{"verify", "127.0.0.1:1/a:b", "--key", p("nokey.pub")}, cmdutil.ExitUsage},
		{[]string{"resolve", p("nothing.yaml")}, cmdutil.ExitFailure},
		{[]string{"build", p("nothing.yaml"), "--dry-run"}, cmdutil.ExitFailure},
		{[]string{"compat", "driver", "--cuda", "12.4"}, cmdutil.ExitUsage},
		{[]string{"compat", "gpu", "nosuchgpu", "--cuda", "12.4"}, cmdutil.ExitUsage},
		{[]string{"compat", "refresh", "--check", "--compat-data", p("nothing.json")}, cmdutil.ExitFailure},
		{[]string{"fatbin", "prune", p("nothing")}, cmdutil.ExitUsage},
		{[]string{"analyze", src, "--no-such-flag"}, cmdutil.ExitUsage},
	}
}

// TestJSONContract runs every verb with --json, on success and on
// failure, and holds each output to the contract and its schema file in
// docs/schema (a regression test: on the old main analyze, slim, convert,
// weights and host check printed nothing on failure, weights printed
// camelCase keys, and three schema marker styles were in use).
func TestJSONContract(t *testing.T) {
	schema := schemas(t)
	runs := verbRuns(t)
	seen := map[string]bool{}
	for _, r := range runs {
		args := append(append([]string{}, r.args...), "--json")
		if c, _, err := newTestRoot().Find(r.args); err == nil && c.Flags().Lookup("progress") != nil {
			args = append(args, "--progress", "none")
		}
		code, out, errOut := kiln(t, args...)
		if code != r.code {
			t.Errorf("%v: exit %d, want %d\nstdout: %s\nstderr: %s", args, code, r.code, out, errOut)
		}
		if os.Getenv("KILN_DUMP") != "" {
			fmt.Printf("=== %v (%d)\n%s\n--- stderr\n%s", args, code, out, errOut)
		}
		if obj := checkContract(t, schema, args, code, out); obj != nil {
			seen[fmt.Sprint(obj["schema"])] = true
		}
	}
	// Every schema a command registers was seen, and has its file.
	root := newTestRoot()
	walk(root, func(c *cobra.Command) {
		if c.Flags().Lookup("json") == nil {
			return
		}
		name := cmdutil.Schema(c)
		if name == "" {
			t.Errorf("%s has --json but no schema (cmdutil.SetSchema)", c.CommandPath())
			return
		}
		if _, err := os.Stat("../../docs/schema/" + strings.ReplaceAll(name, "/", ".") + ".json"); err != nil {
			t.Errorf("%s: schema %s has no file in docs/schema: %v", c.CommandPath(), name, err)
		}
		if !seen[name] {
			t.Logf("%s: schema %s not exercised here", c.CommandPath(), name)
		}
	})
}

// newTestRoot is kiln's root with every verb, built as Main builds it.
func newTestRoot() *cobra.Command {
	var out, errOut bytes.Buffer
	f := verbkit.New(&cmdutil.IO{In: strings.NewReader(""), Out: &out, ErrOut: &errOut}, cmdutil.BuildInfo{Version: "dev"}, nil)
	return verbkit.NewRoot(f, verbs...)
}

func walk(c *cobra.Command, fn func(*cobra.Command)) {
	fn(c)
	for _, s := range c.Commands() {
		walk(s, fn)
	}
}

// TestDefaultOutputFitsEightyColumns runs every verb as TestJSONContract
// does, without --json, as a person at an 80-column terminal reads it
// (issue 36: resolve printed 236 columns, verify 264, convert's table 86):
// no line of stdout or stderr is wider than 80 columns, prose wraps, and
// full values are --json's. Two things may pass the width, by choice:
//   - a value that cannot be broken (a reference with its digest, a
//     digest, a path) on a line of its own or after its label, where a
//     person copies it whole (termtest.Fits);
//   - the error of a failed run, "kiln: ..." last on stderr: one line,
//     printed once, as every CLI prints it, for grep and for logs.
func TestDefaultOutputFitsEightyColumns(t *testing.T) {
	for _, r := range verbRuns(t) {
		args := append([]string{}, r.args...)
		if c, _, err := newTestRoot().Find(r.args); err == nil && c.Flags().Lookup("progress") != nil {
			args = append(args, "--progress", "plain")
		}
		code, out, errOut := kiln(t, args...)
		errLines := strings.Split(strings.TrimRight(errOut, "\n"), "\n")
		if code != 0 && strings.HasPrefix(errLines[len(errLines)-1], "kiln: ") {
			errLines = errLines[:len(errLines)-1]
		}
		for _, stream := range []struct {
			name  string
			lines []string
		}{{"stdout", strings.Split(out, "\n")}, {"stderr", errLines}} {
			for _, line := range stream.lines {
				if n := termtable.Len(line); !testkit.Fits(line, 80) {
					t.Errorf("kiln %s: a %d-column line on %s:\n%s", strings.Join(r.args, " "), n, stream.name, line)
				}
			}
		}
	}
}
