package builder

import (
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/moby/buildkit/frontend/dockerfile/instructions"
	"github.com/moby/buildkit/frontend/dockerfile/parser"
	"github.com/moby/buildkit/frontend/dockerfile/shell"

	"github.com/kiln-build/kiln/recipes"
)

// dfMeaning is what BuildKit's Dockerfile frontend reads from an export:
// its parser and instruction parser, and every word expanded by its lexer
// as dockerfile2llb's dispatch does, in an environment where $PATH, $HOME
// and $x are set (so anything left unescaped expands and shows).
type dfMeaning struct {
	env, labels map[string]string
	workdir     string
	user        string
	copies      [][]string // sources..., dest
	runs        map[string]int
	probes      [][]string
}

func readDockerfile(t *testing.T, df string) dfMeaning {
	t.Helper()
	res, err := parser.Parse(strings.NewReader(df))
	if err != nil {
		t.Fatalf("BuildKit's parser: %v\n%s", err, df)
	}
	stages, _, err := instructions.Parse(res.AST, nil)
	if err != nil {
		t.Fatalf("BuildKit's instructions: %v\n%s", err, df)
	}
	lex := shell.NewLex('\\')
	vars := shell.EnvsFromSlice([]string{"PATH=/expanded", "HOME=/expanded", "x=expanded"})
	m := dfMeaning{env: map[string]string{}, labels: map[string]string{}, runs: map[string]int{}}
	for _, st := range stages {
		for _, c := range st.Commands {
			if ex, ok := c.(instructions.SupportsSingleWordExpansion); ok {
				if _, isArg := c.(*instructions.ArgCommand); !isArg {
					if err := ex.Expand(func(w string) (string, error) {
						s, _, err := lex.ProcessWord(w, vars)
						return s, err
					}); err != nil {
						t.Fatalf("%s: %v", c, err)
					}
				}
			}
			switch c := c.(type) {
			case *instructions.EnvCommand:
				if st.Name == "runtime" {
					for _, kv := range c.Env {
						m.env[kv.Key] = kv.Value
					}
				}
			case *instructions.LabelCommand:
				for _, kv := range c.Labels {
					m.labels[kv.Key] = kv.Value
				}
			case *instructions.WorkdirCommand:
				m.workdir = c.Path
			case *instructions.UserCommand:
				m.user = c.User
			case *instructions.CopyCommand:
				if c.From != "" {
					continue // a gathered file step, copied from its stage
				}
				m.copies = append(m.copies, append(slices.Clone(c.SourcePaths), c.DestPath))
			case *instructions.RunCommand:
				m.runs[st.Name]++
				if st.Name == "test" {
					if c.PrependShell {
						t.Errorf("probe %q in the shell form: the Dockerfile frontend reads heredocs and continuations into it", c.CmdLine)
					}
					m.probes = append(m.probes, c.CmdLine)
				}
			}
		}
	}
	return m
}

// The export means what kiln build builds, whatever the recipe's values
// hold: ENV values JSON-escaped (cuda\u003e=12.4) or expanded (${PATH}),
// a path with a space split into COPY arguments, or a quote, a '$' or a
// heredoc marker read by the lexer would each make the image built from it
// differ (issue 25 item 4, issue 27 D8).
func TestDockerfileMeansWhatLLBBuilds(t *testing.T) {
	p := testPlan(t, func(r *recipes.Recipe) {
		r.App.Workdir = `/srv/my app/$HOME`
		r.App.User = `app'user"$x`
		r.App.Env = map[string]string{
			"EXTRA_PATH": "/opt/bin:${PATH}",
			"QUOTES":     `a"b\c'd <&> $x \`,
		}
		r.App.Files = append(r.App.Files, recipes.FileCopy{Src: "my dir", Dst: `/opt/it's $x\ "here"/`})
		r.Test = []string{`cat <<EOF`, `echo "$HOME" \`, `[ -d /app ]`}
	})
	df, err := Dockerfile(p, Inputs{RecipeHash: "sha256:r"})
	if err != nil {
		t.Fatal(err)
	}
	img, err := ImageConfig(p, Inputs{RecipeHash: "sha256:r"}, PlatformOrDefault(p), nil)
	if err != nil {
		t.Fatal(err)
	}
	L, err := Lower(p)
	if err != nil {
		t.Fatal(err)
	}
	got := readDockerfile(t, df)

	want := map[string]string{}
	for _, kv := range img.Config.Env {
		k, v, _ := strings.Cut(kv, "=")
		want[k] = v
	}
	for k, v := range want {
		if got.env[k] != v {
			t.Errorf("ENV %s: the export means %q, kiln build sets %q", k, got.env[k], v)
		}
	}
	if !strings.Contains(want["NVIDIA_REQUIRE_CUDA"], ">=") {
		t.Errorf("NVIDIA_REQUIRE_CUDA %q: the test needs a '>'", want["NVIDIA_REQUIRE_CUDA"])
	}
	if !maps.Equal(got.labels, img.Config.Labels) {
		t.Errorf("labels: export %v, kiln build %v", got.labels, img.Config.Labels)
	}
	if got.workdir != img.Config.WorkingDir || got.user != img.Config.User {
		t.Errorf("WORKDIR %q USER %q, kiln build %q %q", got.workdir, got.user, img.Config.WorkingDir, img.Config.User)
	}
	var copies [][]string
	runs := map[string]int{}
	for _, st := range []Stage{L.Devel, L.Runtime} {
		for _, step := range st.Steps {
			if len(step.Copies) == 0 {
				runs[st.Name]++
			}
			for _, c := range step.Copies {
				copies = append(copies, []string{c.Src, c.Dst})
			}
		}
	}
	if !slices.EqualFunc(got.copies, copies, slices.Equal) {
		t.Errorf("COPY %q, kiln build copies %q", got.copies, copies)
	}
	runs["test"] = len(L.Probes)
	if !maps.Equal(got.runs, runs) {
		t.Errorf("RUN instructions per stage %v, kiln build runs %v", got.runs, runs)
	}
	for i, c := range L.Probes {
		if i >= len(got.probes) || !slices.Equal(got.probes[i], []string{"/bin/sh", "-c", c}) {
			t.Errorf("probe %d: export runs %q, kiln build runs /bin/sh -c %q", i, got.probes, c)
		}
	}
	if t.Failed() {
		t.Logf("the export:\n%s", df)
	}
}

// A plan that did not come through recipe validation (a lock file) with a
// newline in a value is refused rather than written as two instructions.
func TestDockerfileRefusesControlCharacters(t *testing.T) {
	p := testPlan(t, func(r *recipes.Recipe) { r.App.Workdir = "/app\nRUN touch /x" })
	df, err := Dockerfile(p, Inputs{})
	if err == nil || !strings.Contains(err.Error(), "workdir") {
		t.Fatalf("err %v, Dockerfile:\n%s", err, df)
	}
}
