package cmdutil

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/kiln-build/kiln/cmd/kiln/internal/termtest"
	"github.com/kiln-build/kiln/internal/termtable"
)

func TestProgressRedrawsFitTheTerminal(t *testing.T) {
	for _, cols := range []int{80, 160} {
		tty, out, seen := termtest.OpenTerm(t, cols)
		var done atomic.Int64
		const total = 349 << 20
		bar := StartProgress(tty, "auto", "slimming 127.0.0.1:5000/kiln/naive-app:cu124-with-a-long-tag", total, &done)
		done.Store(100 << 20)
		termtest.WaitFor(t, "a first frame", func() bool { return seen("100.0 MiB") })
		done.Store(200 << 20)
		termtest.WaitFor(t, "a redraw", func() bool { return seen("200.0 MiB") })
		done.Store(total)
		bar.Stop()
		o := out()
		t.Logf("%d columns:\n%s", cols, o)
		termtest.CheckFrames(t, o, cols)
		if !strings.Contains(o, "349.0 MiB / 349.0 MiB") {
			t.Errorf("%d columns: the last frame does not show the total:\n%q", cols, o)
		}
	}
}

func TestProgressOneBarPerCounterWithETA(t *testing.T) {
	tty, out, seen := termtest.OpenTerm(t, 80)
	p := NewProgress(tty, "tty")
	a := p.Counter("scan img", 100<<20)
	b := p.Counter("rewrite img", 100<<20)
	a.Store(50 << 20)
	termtest.WaitFor(t, "the first bar", func() bool { return seen("50.0 MiB / 100.0 MiB") })
	a.Store(100 << 20)
	b.Store(10 << 20)
	termtest.WaitFor(t, "the second bar", func() bool { return seen("10.0 MiB / 100.0 MiB") })
	b.Store(100 << 20)
	p.Stop()
	o := out()
	termtest.CheckFrames(t, o, 80)
	for _, want := range []string{"scan img", "rewrite img", "done"} {
		if !strings.Contains(o, want) {
			t.Errorf("no %q in\n%q", want, o)
		}
	}
	// Before its end a bar shows an estimate: Go durations (5s, 1m2s).
	if !regexp.MustCompile(`\d+(ms|s)`).MatchString(termtest.Plain(o)) {
		t.Errorf("no ETA in\n%q", o)
	}
}

func TestProgressPlainLinePerEvent(t *testing.T) {
	var buf bytes.Buffer
	p := NewProgress(&buf, "plain")
	n := p.Counter("pull weights", 400<<20)
	n.Store(100 << 20)
	p.tick()
	p.tick() // nothing moved: no line
	n.Store(400 << 20)
	p.Stop()
	o := buf.String()
	lines := strings.Split(strings.TrimSpace(o), "\n")
	if len(lines) != 3 {
		t.Fatalf("want a start, a progress and an end line, got:\n%s", o)
	}
	if !strings.HasPrefix(lines[0], "pull weights: 400.0 MiB to read") ||
		!regexp.MustCompile(`^pull weights: 100\.0 MiB / 400\.0 MiB \(25%, .*/s, ETA \S+\)$`).MatchString(lines[1]) ||
		!strings.HasPrefix(lines[2], "pull weights: done, 400.0 MiB in ") {
		t.Errorf("plain lines:\n%s", o)
	}
	if strings.ContainsAny(o, "\r\x1b") {
		t.Errorf("plain output has terminal escapes: %q", o)
	}
	// auto on a pipe says nothing about small totals; none says nothing.
	for _, mode := range []string{"auto", "none"} {
		var q bytes.Buffer
		p := NewProgress(&q, mode)
		p.Counter("small", 1<<20).Store(1 << 20)
		p.Stop()
		if q.Len() != 0 {
			t.Errorf("--progress %s on a pipe: %q", mode, q.String())
		}
	}
}

func TestParseProgressWords(t *testing.T) {
	for in, want := range map[string]ProgressMode{"auto": ProgressAuto, "tty": ProgressTTY, "bars": ProgressTTY, "plain": ProgressPlain, "none": ProgressNone, "quiet": ProgressNone} {
		if got, err := ParseProgress(in); err != nil || got != want {
			t.Errorf("ParseProgress(%q) = %q, %v", in, got, err)
		}
	}
	var ee *ExitError
	if _, err := ParseProgress("loud"); !errors.As(err, &ee) || ee.Code != ExitUsage {
		t.Errorf("ParseProgress(loud): %v", err)
	}
}

func TestColorHonoursNoColor(t *testing.T) {
	tty, out, _ := termtest.OpenTerm(t, 80)
	defer out()
	t.Setenv("TERM", "xterm-256color")
	t.Setenv("NO_COLOR", "")
	if !ColorEnabled(tty) {
		t.Error("no colour on a terminal")
	}
	t.Setenv("NO_COLOR", "1")
	if ColorEnabled(tty) {
		t.Error("colour with NO_COLOR=1")
	}
	t.Setenv("NO_COLOR", "")
	if ColorEnabled(io.Discard) || ColorEnabled(&bytes.Buffer{}) {
		t.Error("colour on a non-terminal")
	}
	if w := TermWidth(tty); w != 80 {
		t.Errorf("TermWidth = %d, want 80", w)
	}
	if w := TermWidth(&bytes.Buffer{}); w != 80 {
		t.Errorf("TermWidth(pipe) = %d, want 80", w)
	}
}

// Lines a verb writes while bars are drawn print above them, whole.
func TestProgressWriterPrintsAboveTheBars(t *testing.T) {
	tty, out, seen := termtest.OpenTerm(t, 80)
	p := NewProgress(tty, "tty")
	n := p.Counter("warming oci:/cache", 100<<20)
	n.Store(10 << 20)
	termtest.WaitFor(t, "the bar", func() bool { return seen("10.0 MiB / 100.0 MiB") })
	fmt.Fprintf(p.Writer(), "kiln: blob sha256:0123456789ab: try 1/5 failed: connection reset\n")
	termtest.WaitFor(t, "the notice", func() bool { return seen("try 1/5 failed") })
	n.Store(100 << 20)
	p.Stop()
	o := out()
	termtest.CheckFrames(t, o, 80)
	if !strings.Contains(o, "kiln: blob sha256:0123456789ab: try 1/5 failed: connection reset\r\n") {
		t.Errorf("the notice is not a whole line:\n%q", o)
	}
	var buf bytes.Buffer
	q := NewProgress(&buf, "plain")
	defer q.Stop()
	if q.Writer() != io.Writer(&buf) {
		t.Error("plain Writer is not the output")
	}
}

// Issue 36: Ctrl-C in the middle of a warm. The terminal echoes ^C where
// the cursor waits, under the bars, and the work goes on until it sees its
// context end; then the display stops with the warm's bar where it
// stopped, and the verb's last word goes under it. Before, the redraw
// after the echo began two columns in, wrapped, and left a torn copy of
// the bar above the last frame. The bar that stopped short says stopped,
// not an estimate.
func TestProgressInterruptEndsOnOneCleanLine(t *testing.T) {
	const cols = 80
	tty, out, seen := termtest.OpenTerm(t, cols)
	p := NewProgress(tty, "tty")
	var base atomic.Int64
	part := p.Parts("warming oci:/var/cache/kiln/oci", 697<<20, &base)
	a := part("  layer sha256:0123456789ab", 400<<20)
	b := part("  layer sha256:ba9876543210", 297<<20)
	a.Store(200 << 20)
	b.Store(149 << 20)
	termtest.WaitFor(t, "the bars", func() bool { return seen("349.0 MiB / 697.0 MiB") })
	if _, err := tty.Write([]byte("^C")); err != nil { // the terminal's echo of Ctrl-C
		t.Fatal(err)
	}
	a.Store(210 << 20)
	termtest.WaitFor(t, "a redraw after the echo", func() bool { return seen("359.0 MiB / 697.0 MiB") })
	p.Stop()
	fmt.Fprintln(tty, "kiln: interrupted; the same command resumes")
	o := out()
	screen := termtest.Screen(o, cols)
	t.Logf("the terminal after Ctrl-C:\n%s", strings.Join(screen, "\n"))
	if len(screen) != 2 || !strings.HasPrefix(screen[0], "warming oci:/v") || !strings.Contains(screen[0], "359.0 MiB / 697.0 MiB") || !strings.HasSuffix(screen[0], " stopped") ||
		screen[1] != "kiln: interrupted; the same command resumes" {
		t.Errorf("want the warm's bar where it stopped, then the verb's word; the terminal shows:\n%s\n%q", strings.Join(screen, "\n"), o)
	}
	for _, l := range screen {
		if n := termtable.Len(l); n >= cols {
			t.Errorf("a line of %d columns on a %d-column terminal: %q", n, cols, l)
		}
	}
}
