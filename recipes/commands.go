package recipes

import (
	"fmt"
	"path"
	"slices"
	"strings"

	"github.com/kiln-build/kiln/internal/shellword"
	"github.com/kiln-build/kiln/recipes/wheelkey"
)

// shellWords are the sh builtins and reserved words a test line may start
// a command with: the shell itself runs them.
var shellWords = []string{
	".", ":", "[", "[[", "!", "{", "}", "(", ")", "alias", "break", "case", "cd", "command", "continue", "do", "done",
	"echo", "elif", "else", "esac", "eval", "exec", "exit", "export", "false", "fi", "for", "getopts", "hash",
	"if", "in", "printf", "pwd", "read", "readonly", "return", "set", "shift", "test", "then", "times", "trap",
	"true", "type", "ulimit", "umask", "unset", "until", "wait", "while",
}

// baseTools are the programs every base kiln builds on has (Debian's and
// Ubuntu's essential packages, coreutils in the others): a test line may
// call them.
var baseTools = []string{
	"sh", "bash", "env", "ls", "cat", "grep", "head", "tail", "sed", "find", "stat", "du", "df", "id", "uname",
	"mkdir", "rm", "cp", "mv", "touch", "chmod", "sleep", "tar", "gzip", "sort", "wc", "tr", "cut", "xargs",
	"timeout", "date", "readlink", "realpath", "basename", "dirname", "ldd", "ldconfig", "diff", "cmp",
	"sha256sum", "md5sum", "tee", "uniq", "nproc", "which",
}

// consoleScripts are programs the pip packages a plan installs bring,
// by the package that brings them.
var consoleScripts = map[string][]string{
	"torch":        {"torchrun", "torchfrtrace"},
	"transformers": {"transformers-cli", "transformers", "huggingface-cli", "hf"},
	"accelerate":   {"accelerate", "accelerate-launch", "accelerate-config", "accelerate-estimate-memory"},
}

// systemDirs hold the base's programs: an absolute path there names a
// base tool (or the image's Python, see pythonPaths).
var systemDirs = []string{"/bin", "/usr/bin", "/sbin", "/usr/sbin", "/usr/local/bin"}

// commandsStep warns about each test line and entrypoint that calls a
// program the image will not have: kiln's tests run them in the built
// image, and a container runs the entrypoint, where "not found" would be
// the first anyone hears of it.
func (s *resolver) commandsStep() {
	p := s.plan
	for i, line := range p.Test {
		for _, prog := range commandWords(line) {
			if why := s.missingProgram(prog); why != "" {
				s.warn("test[%d] (%s) runs %s, which the image will not have: %s", i, line, prog, why)
			}
		}
	}
	if p.App == nil {
		return
	}
	for _, f := range []struct {
		name string
		argv []string
	}{{"app.entrypoint", p.App.Entrypoint}, {"app.cmd", p.App.Cmd}} {
		if len(f.argv) == 0 || f.name == "app.cmd" && len(p.App.Entrypoint) > 0 {
			continue
		}
		prog := f.argv[0]
		if why := s.missingProgram(prog); why != "" {
			s.warn("%s runs %s, which the image will not have: %s", f.name, prog, why)
		}
	}
}

// missingProgram says why prog (a command's first word) is not in the
// image, or "" when something provides it.
func (s *resolver) missingProgram(prog string) string {
	p := s.plan
	py := pythonNames(p.Python)
	provides := fmt.Sprintf("kiln puts %s (Python %s) on the PATH; apt: and pip: install other programs, app.files ships your own", strings.Join(py, ", "), p.Python)
	if strings.Contains(prog, "$") || strings.Contains(prog, "`") {
		return "" // expanded by the shell: nothing to check
	}
	if strings.HasPrefix(prog, "/") {
		dir, base := path.Split(prog)
		dir = path.Clean(dir)
		if s.shipped(prog) || slices.Contains(s.pythonPaths(), prog) {
			return ""
		}
		if slices.Contains(systemDirs, dir) && (slices.Contains(baseTools, base) || s.fromPackages(base)) {
			return ""
		}
		if slices.Contains(py, base) {
			return fmt.Sprintf("%s is not where the image's Python is; call %s (kiln links it in /usr/local/bin)", prog, base)
		}
		return fmt.Sprintf("no file the recipe ships or kiln installs is at %s; %s", prog, provides)
	}
	if strings.Contains(prog, "/") {
		// Relative to the app's workdir (the image's, / without one).
		wd := "/"
		if p.App != nil && p.App.Workdir != "" {
			wd = p.App.Workdir
		}
		if s.shipped(path.Join(wd, prog)) {
			return ""
		}
		return fmt.Sprintf("no file the recipe's app.files ship is at %s (relative to app.workdir)", prog)
	}
	if slices.Contains(shellWords, prog) || slices.Contains(baseTools, prog) || slices.Contains(py, prog) || s.fromPackages(prog) {
		return ""
	}
	if strings.HasPrefix(prog, "python") || strings.HasPrefix(prog, "pip") {
		return fmt.Sprintf("the image's Python is %s; %s", p.Python, provides)
	}
	return provides
}

// pythonPaths are the absolute paths of the image's Python commands.
func (s *resolver) pythonPaths() []string {
	var out []string
	for _, n := range pythonNames(s.plan.Python) {
		out = append(out, "/usr/local/bin/"+n)
	}
	if s.plan.PythonSource == PythonOS {
		out = append(out, "/usr/bin/python3", "/usr/bin/python"+s.plan.Python, "/usr/bin/pip3")
	}
	return out
}

// fromPackages says whether an apt or pip package the plan installs is
// likely to bring prog: a package of that name, or a known console script.
func (s *resolver) fromPackages(prog string) bool {
	if slices.Contains(s.plan.Apt, prog) {
		return true
	}
	for _, pp := range s.plan.Pip {
		n := wheelkey.NormalizeName(pp.Name)
		if n == wheelkey.NormalizeName(prog) || slices.Contains(consoleScripts[n], prog) {
			return true
		}
	}
	return false
}

// shipped says whether abs is (under) a destination of the app's files.
func (s *resolver) shipped(abs string) bool {
	a := s.plan.App
	if a == nil {
		return false
	}
	abs = path.Clean(abs)
	for _, f := range a.Files {
		d := path.Clean(f.Dst)
		if abs == d || strings.HasPrefix(abs, strings.TrimSuffix(d, "/")+"/") {
			return true
		}
	}
	return false
}

// commandWords are the programs a shell line runs: the first word of each
// of its commands (split at ;, &&, ||, | and newlines outside quotes),
// past variable assignments, "!" and the words that run what follows
// (exec, command, env, then, do...).
func commandWords(line string) []string {
	var out []string
	for _, cmd := range splitCommands(line) {
		words := shellFields(cmd)
		for len(words) > 0 {
			w := words[0]
			switch {
			case strings.Contains(w, "=") && !strings.HasPrefix(w, "=") && !strings.ContainsAny(w[:strings.Index(w, "=")], "/\"'"):
				words = words[1:] // VAR=value
				continue
			case slices.Contains([]string{"!", "exec", "command", "env", "then", "do", "else", "if", "while", "until", "time", "nohup", "{", "("}, w):
				if w == "command" && len(words) > 1 && strings.HasPrefix(words[1], "-") {
					words = nil // command -v X: a lookup, not a run
					continue
				}
				words = words[1:]
				continue
			}
			break
		}
		if len(words) > 0 {
			out = append(out, strings.TrimLeft(words[0], "({"))
		}
	}
	return out
}

// splitCommands splits a shell line at ;, &, |, newlines, and ( ) outside
// quotes.
func splitCommands(line string) []string {
	return shellword.Split(line, func(r rune) bool { return strings.ContainsRune(";&|\n()", r) })
}

// shellFields splits a command at blanks outside quotes, removing the
// quotes.
func shellFields(cmd string) []string {
	var out []string
	for _, w := range shellword.Words(cmd) {
		out = append(out, shellword.Unquote(w))
	}
	return out
}
