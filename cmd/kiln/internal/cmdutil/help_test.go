package cmdutil

import (
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/kiln-build/kiln/internal/termtable"
)

// An example too wide for the terminal is continued with " \" between
// words outside quotes, a flag beside its value, so that what a person
// pastes is the command as written; a comment stays a comment; a line
// that fits is left alone.
func TestWrapExample(t *testing.T) {
	cmd := `  kiln slim 127.0.0.1:5000/acme/serve:1.2 --to 127.0.0.1:5000/acme/serve:slim --probe 'python3 -c "import torch; print(torch.cuda.is_available())"' --policy runtime-strict`
	ex := "  kiln recipes list\n" + cmd + "\n  # " + strings.Repeat("a comment ", 12)
	got := wrapExample(ex, 60)
	lines := strings.Split(got, "\n")
	if lines[0] != "  kiln recipes list" {
		t.Errorf("a line that fits changed: %q", lines[0])
	}
	var joined []string
	comment := false
	for _, l := range lines[1:] {
		if termtable.Len(l) > 60 && !strings.Contains(l, "'python3") {
			t.Errorf("%d columns: %q", termtable.Len(l), l)
		}
		switch {
		case strings.HasPrefix(l, "  # "):
			comment = true
		case comment && !strings.HasPrefix(l, "  # "):
			t.Errorf("a comment's continuation is not a comment: %q", l)
		default:
			joined = append(joined, strings.TrimSuffix(strings.TrimSpace(l), " \\"))
		}
	}
	if j := strings.Join(joined, " "); j != strings.TrimSpace(cmd) {
		t.Errorf("the command pasted back is\n%s\nwant\n%s", j, strings.TrimSpace(cmd))
	}
	if !strings.Contains(got, "--to 127.0.0.1:5000/acme/serve:slim") || !strings.Contains(got, "--policy runtime-strict") {
		t.Errorf("a flag left its value:\n%s", got)
	}
	for i, l := range lines[1 : len(lines)-2] {
		if !strings.HasSuffix(l, " \\") && i < len(joined)-1 {
			t.Errorf("line %d of the command is not continued: %q", i, l)
		}
	}
}

// A description's line too wide hangs under its list item or its second
// column; flags hang under their usage column even when a word (a path)
// is wider than the room pflag's own wrap leaves.
func TestWrapProseAndFlags(t *testing.T) {
	got := wrapProse("- "+strings.Repeat("word ", 20)+"\n  0    "+strings.Repeat("ok ", 30), 40)
	for _, l := range strings.Split(got, "\n") {
		if termtable.Len(l) > 40 {
			t.Errorf("%d columns: %q", termtable.Len(l), l)
		}
		if !strings.HasPrefix(l, "- ") && !strings.HasPrefix(l, "  0    ") && !strings.HasPrefix(l, "       ") && !strings.HasPrefix(l, "  w") {
			t.Errorf("not hung under its text: %q", l)
		}
	}
	flags := "      --mirror string   registry mirror, read before the registry (default $KILN_MIRROR, then /etc/containerd/certs.d/*/hosts.toml; \"\" turns mirrors off)\n"
	wider := false
	for _, l := range strings.Split(flagsWrappedByPflag(64), "\n") {
		wider = wider || termtable.Len(l) > 64
	}
	if !wider {
		t.Log("pflag's own wrap no longer prints the rest of a usage whole on one line: FlagUsagesWrapped could do")
	}
	for _, l := range strings.Split(wrapFlags(flags, 64), "\n") {
		if termtable.Len(l) > 64 {
			t.Errorf("%d columns: %q", termtable.Len(l), l)
		}
		if !strings.HasPrefix(l, "      --mirror string   ") && !strings.HasPrefix(l, strings.Repeat(" ", 24)) {
			t.Errorf("not under the usage column: %q", l)
		}
	}
}

// flagsWrappedByPflag is what pflag's FlagUsagesWrapped makes of the
// same usage.
func flagsWrappedByPflag(width int) string {
	fs := pflag.NewFlagSet("x", pflag.ContinueOnError)
	fs.String("mirror", "", "registry mirror, read before the registry (default $KILN_MIRROR, then /etc/containerd/certs.d/*/hosts.toml; \"\" turns mirrors off)")
	return fs.FlagUsagesWrapped(width)
}
