// Package termtest renders kiln's output on a pseudo-terminal in tests,
// as a person's terminal shows it, and checks its frames: each redraw in
// place, no line as wide as the terminal.
package termtest

import (
	"bytes"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/creack/pty"
	"github.com/kiln-build/kiln/internal/termtable"
)

// OpenTerm opens a pseudo-terminal cols wide; what is written to the
// returned *os.File is read back from the returned buffer once done is
// called (it closes the terminal and waits for the reader).
func OpenTerm(t testing.TB, cols int) (tty *os.File, out func() string, seen func(string) bool) {
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

// WaitFor polls until cond holds; the deadline only bounds a broken
// renderer, it is no assertion about speed.
func WaitFor(t testing.TB, what string, cond func() bool) {
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

// CheckFrames asserts that the output redraws with cursor-up and clear,
// and that nothing written between two line breaks (or redraw escapes)
// is wider than cols: a wider line wraps, and every redraw then stacks a
// new line on the terminal.
func CheckFrames(t testing.TB, out string, cols int) {
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

// Plain is out without its terminal escapes.
func Plain(out string) string { return escapes.ReplaceAllString(out, "") }
