package cmdutil

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/creack/pty"
	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/kiln-build/kiln/internal/termtable"
	"github.com/kiln-build/kiln/layers"
)

// openTerm opens a pseudo-terminal cols wide; what is written to the
// returned *os.File is read back from the returned buffer once done is
// called (it closes the terminal and waits for the reader).
func openTerm(t *testing.T, cols int) (tty *os.File, out func() string, seen func(string) bool) {
	t.Helper()
	ptmx, tty, err := pty.Open()
	if err != nil {
		t.Skipf("no pseudo-terminal: %v", err)
	}
	if err := pty.Setsize(tty, &pty.Winsize{Cols: uint16(cols), Rows: 40}); err != nil {
		t.Fatal(err)
	}
	var mu = make(chan struct{}, 1)
	var buf bytes.Buffer
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		b := make([]byte, 4096)
		for {
			n, err := ptmx.Read(b)
			mu <- struct{}{}
			buf.Write(b[:n])
			<-mu
			if err != nil {
				return
			}
		}
	}()
	seen = func(s string) bool {
		mu <- struct{}{}
		defer func() { <-mu }()
		return strings.Contains(buf.String(), s)
	}
	out = func() string {
		tty.Close()
		<-readDone
		ptmx.Close()
		return buf.String()
	}
	return tty, out, seen
}

// waitFor polls until cond holds; the deadline only bounds a broken
// renderer, it is no assertion about speed.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(30 * time.Second); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("never saw %s", what)
		}
	}
}

var (
	cursorUp   = regexp.MustCompile(`\x1b\[\d+A`)
	escapes    = regexp.MustCompile(`\x1b\[[0-9;?]*[A-Za-z]`)
	lineBreaks = regexp.MustCompile(`\r\n|\r|\n|\x1b\[\d*[AJK]`)
)

// checkFrames asserts that the output redraws with cursor-up and clear,
// and that nothing written between two line breaks (or redraw escapes)
// is wider than cols: a wider line wraps, and every redraw then stacks a
// new line on the terminal.
func checkFrames(t *testing.T, out string, cols int) {
	t.Helper()
	if !cursorUp.MatchString(out) || !strings.Contains(out, "\x1b[J") {
		t.Errorf("redraws do not move the cursor up and clear (ESC[nA, ESC[J):\n%q", out)
	}
	if strings.Contains(out, strings.Repeat(" ", 40)) {
		t.Errorf("a redraw is cleared with spaces:\n%q", out)
	}
	for _, seg := range lineBreaks.Split(out, -1) {
		seg = escapes.ReplaceAllString(seg, "")
		// Strictly narrower: a line that fills the last column leaves
		// tmux (and others) on the next row after its line break, and the
		// one-row cursor-up of the redraw then stacks a line per frame.
		if n := termtable.Len(seg); n >= cols {
			t.Errorf("a line is %d columns on a %d-column terminal (the last column must stay free): %q", n, cols, seg)
		}
	}
}

func TestProgressRedrawsFitTheTerminal(t *testing.T) {
	for _, cols := range []int{80, 160} {
		tty, out, seen := openTerm(t, cols)
		var done atomic.Int64
		const total = 349 << 20
		bar := StartProgress(tty, "auto", "slimming 127.0.0.1:5000/kiln/naive-app:cu124-with-a-long-tag", total, &done)
		done.Store(100 << 20)
		waitFor(t, "a first frame", func() bool { return seen("100.0 MiB") })
		done.Store(200 << 20)
		waitFor(t, "a redraw", func() bool { return seen("200.0 MiB") })
		done.Store(total)
		bar.Stop()
		o := out()
		t.Logf("%d columns:\n%s", cols, o)
		checkFrames(t, o, cols)
		if !strings.Contains(o, "349.0 MiB / 349.0 MiB") {
			t.Errorf("%d columns: the last frame does not show the total:\n%q", cols, o)
		}
	}
}

func TestProgressOneBarPerCounterWithETA(t *testing.T) {
	tty, out, seen := openTerm(t, 80)
	p := NewProgress(tty, "tty")
	a := p.Counter("scan img", 100<<20)
	b := p.Counter("rewrite img", 100<<20)
	a.Store(50 << 20)
	waitFor(t, "the first bar", func() bool { return seen("50.0 MiB / 100.0 MiB") })
	a.Store(100 << 20)
	b.Store(10 << 20)
	waitFor(t, "the second bar", func() bool { return seen("10.0 MiB / 100.0 MiB") })
	b.Store(100 << 20)
	p.Stop()
	o := out()
	checkFrames(t, o, 80)
	for _, want := range []string{"scan img", "rewrite img", "done"} {
		if !strings.Contains(o, want) {
			t.Errorf("no %q in\n%q", want, o)
		}
	}
	// Before its end a bar shows an estimate: Go durations (5s, 1m2s).
	if !regexp.MustCompile(`\d+(ms|s)`).MatchString(escapes.ReplaceAllString(o, "")) {
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
	tty, out, _ := openTerm(t, 80)
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

// A layer gets its bar when its read starts, under the image's bar, which
// counts every layer's bytes.
func TestLayerBarsOnePerLayerUnderTheImage(t *testing.T) {
	tty, out, seen := openTerm(t, 80)
	img := &layers.Image{}
	for i := range 3 {
		h, _ := v1.NewHash("sha256:" + strings.Repeat(fmt.Sprint(i), 64))
		img.Layers = append(img.Layers, &layers.Layer{Index: i, Size: 10 << 20, Digest: h})
	}
	p := NewProgress(tty, "tty")
	layer := LayerBars(p, "analyzing img", img)
	c1 := layer(img.Layers[1])
	c1.Store(5 << 20)
	waitFor(t, "layer 1's bar", func() bool { return seen("5.0 MiB / 10.0 MiB") })
	if !seen("layer 1 sha256:111111111111") {
		t.Errorf("layer 1 not named: %q", out())
	}
	waitFor(t, "the image's bar", func() bool { return seen("5.0 MiB / 30.0 MiB") })
	if seen("layer 0 ") || seen("layer 2 ") {
		t.Error("a bar for a layer whose read has not started")
	}
	c1.Store(10 << 20)
	layer(img.Layers[0]).Store(10 << 20)
	layer(img.Layers[2]).Store(10 << 20)
	p.Stop()
	o := out()
	checkFrames(t, o, 80)
	if !strings.Contains(o, "30.0 MiB / 30.0 MiB") {
		t.Errorf("the image's bar does not end at its size:\n%q", o)
	}
}

// Lines a verb writes while bars are drawn print above them, whole.
func TestProgressWriterPrintsAboveTheBars(t *testing.T) {
	tty, out, seen := openTerm(t, 80)
	p := NewProgress(tty, "tty")
	n := p.Counter("warming oci:/cache", 100<<20)
	n.Store(10 << 20)
	waitFor(t, "the bar", func() bool { return seen("10.0 MiB / 100.0 MiB") })
	fmt.Fprintf(p.Writer(), "kiln: blob sha256:0123456789ab: try 1/5 failed: connection reset\n")
	waitFor(t, "the notice", func() bool { return seen("try 1/5 failed") })
	n.Store(100 << 20)
	p.Stop()
	o := out()
	checkFrames(t, o, 80)
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
