package termtable

import (
	"strings"
	"testing"
)

func TestShorteners(t *testing.T) {
	const dg = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	for _, tc := range []struct{ got, want string }{
		{Digest(dg), "sha256:0123456789ab"},
		{Digest("latest"), "latest"},
		{Middle("/usr/local/cuda/lib64/libcublasLt.so.12", 20), "/usr/local…sLt.so.12"},
		{Middle("short", 20), "short"},
		{End("PyTorch 2.6.0 on CUDA 12.4.1", 12), "PyTorch 2.6…"},
		{Bar(0.5, 8), "▇▇▇▇"},
		{Bar(0.001, 8), "▇"},
		{Bar(0, 8), ""},
	} {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
	if n := Len(Middle("/usr/local/cuda/lib64/libcublasLt.so.12", 20)); n != 20 {
		t.Errorf("Middle gave %d columns", n)
	}
	if n := Len(Paint(true, Red, "FAIL")); n != 4 {
		t.Errorf("a coloured word is %d columns", n)
	}
}

func TestWrapKeepsEveryWord(t *testing.T) {
	s := "install nvidia-container-toolkit (NVIDIA's apt/yum repository), then: sudo nvidia-ctk runtime configure --runtime=docker && sudo systemctl restart docker unknown,grid,tesla,nvidia,quadro,quadrortx,nvidiartx,vapps,vpc,vcs,vws,cloudgaming"
	lines := Wrap(s, 40, "    ")
	for _, l := range lines {
		if Len(l) > 40 {
			t.Errorf("%d columns: %q", Len(l), l)
		}
	}
	var joined []string
	for _, l := range lines {
		joined = append(joined, strings.TrimSpace(l))
	}
	if got := strings.ReplaceAll(strings.Join(joined, " "), " ", ""); got != strings.ReplaceAll(s, " ", "") {
		t.Errorf("words lost:\n%s", strings.Join(lines, "\n"))
	}
}

// A word with no comma to break after (a path, a reference with its
// digest) stays whole on a line of its own, past the width.
func TestWrapKeepsAReferenceWhole(t *testing.T) {
	ref := "registry.example.com/team/serve@sha256:" + strings.Repeat("ab", 32)
	lines := Wrap("signed "+ref+" with key k", 40, "  ")
	if len(lines) != 3 || lines[0] != "signed" || lines[1] != "  "+ref || lines[2] != "  with key k" {
		t.Errorf("wrapped:\n%s", strings.Join(lines, "\n"))
	}
}

func TestTableShrinksToWidth(t *testing.T) {
	var b strings.Builder
	tb := New(Resolve(Width(40)), Column{Head: "SIZE", Right: true}, Column{Head: "PATH", Shrink: true}, Column{Head: "NOTE", Shrink: true, ShrinkEnd: true})
	tb.Row("1.0 GiB", "/usr/local/lib/python3.12/dist-packages/torch/lib/libtorch_cuda.so", "a long note about the file")
	tb.Row("9 B", "/a", "")
	if err := tb.Write(&b); err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(strings.TrimSpace(b.String()), "\n") {
		if Len(l) > 40 {
			t.Errorf("%d columns: %q", Len(l), l)
		}
	}
	if !strings.Contains(b.String(), "/usr/lo…uda.so") {
		t.Errorf("path not cut in the middle:\n%s", b.String())
	}
}

// An image's created_by, a file name or a host's message may carry
// terminal escapes (retitle the window, clear the screen, overwrite a
// line): tables and wrapped prose print the words without them, and
// Style's own colours still work.
func TestTableAndWrapStripTerminalEscapes(t *testing.T) {
	var b strings.Builder
	tb := New(Options{Width: 80, Color: true}, Column{Head: "#"}, Column{Head: "CREATED BY", Shrink: true})
	tb.Row("1", "RUN \x1b]0;pwned\x07make\x1b[2J\r install")
	tb.Style(func(row, col int, s string) string { return Paint(true, Cyan, s) })
	if err := tb.Write(&b); err != nil {
		t.Fatal(err)
	}
	Fprintw(&b, 80, Paint(true, Yellow, "warning:")+" ", "    ", "layer \x1b[31mred\x9b text")
	got := b.String()
	for _, bad := range []string{"\x1b]", "\x07", "\x1b[2J", "\r", "\x1b[31m", "\x9b"} {
		if strings.Contains(got, bad) {
			t.Errorf("output carries %q:\n%q", bad, got)
		}
	}
	if !strings.Contains(got, "make") || !strings.Contains(got, "install") || !strings.Contains(got, Paint(true, Cyan, "1")) {
		t.Errorf("output lost words or colours:\n%q", got)
	}
}
