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

// Screen renders out as a terminal cols wide shows it once everything is
// written: printable text (wrapping past the last column), carriage return,
// line feed, backspace, cursor up/down/forward/back (ESC[nA, B, C, D),
// clear to the end of the screen (ESC[J) and of the line (ESC[K); other
// escapes (colours) are dropped. The rows are the whole history (no
// scrolling off the top), each without trailing spaces, the empty rows at
// the end left out. What CheckFrames reads from the byte stream, Screen
// shows as a person sees it: a redraw that starts off column 0 (after a
// ^C the terminal echoed) leaves a torn copy of the frame above the next.
func Screen(out string, cols int) []string {
	var rows [][]rune
	r, c := 0, 0 // c == cols: a wrap is pending
	row := func(i int) []rune {
		for len(rows) <= i {
			rows = append(rows, nil)
		}
		return rows[i]
	}
	put := func(ch rune) {
		if c >= cols {
			r, c = r+1, 0
		}
		l := row(r)
		for len(l) <= c {
			l = append(l, ' ')
		}
		l[c] = ch
		rows[r] = l
		c++
	}
	num := func(p string, def int) int {
		n := 0
		if p == "" {
			return def
		}
		for _, d := range p {
			if d < '0' || d > '9' {
				return def
			}
			n = n*10 + int(d-'0')
		}
		return n
	}
	rs := []rune(out)
	for i := 0; i < len(rs); i++ {
		switch ch := rs[i]; {
		case ch == '\r':
			c = 0
		case ch == '\n':
			r++
			row(r)
		case ch == '\b':
			c = max(0, min(c, cols-1)-1)
		case ch == 0x1b && i+1 < len(rs) && rs[i+1] == '[':
			j := i + 2
			for j < len(rs) && (rs[j] < 0x40 || rs[j] > 0x7e) {
				j++
			}
			if j == len(rs) {
				return screenRows(rows)
			}
			p := string(rs[i+2 : j])
			switch rs[j] {
			case 'A':
				r, c = max(0, r-num(p, 1)), min(c, cols-1)
			case 'B':
				r, c = r+num(p, 1), min(c, cols-1)
				row(r)
			case 'C':
				c = min(cols-1, c+num(p, 1))
			case 'D':
				c = max(0, min(c, cols-1)-num(p, 1))
			case 'J', 'K':
				if num(p, 0) != 0 {
					break // only "from the cursor on" is drawn by kiln
				}
				l := row(r)
				if cc := min(c, cols); cc < len(l) {
					rows[r] = l[:cc]
				}
				if rs[j] == 'J' {
					rows = rows[:r+1]
				}
			}
			i = j
		case ch == 0x1b:
			i++ // a two-character escape
		case ch < 0x20 || ch == 0x7f:
		default:
			put(ch)
		}
	}
	return screenRows(rows)
}

func screenRows(rows [][]rune) []string {
	var s []string
	for _, l := range rows {
		s = append(s, strings.TrimRight(string(l), " "))
	}
	for len(s) > 0 && s[len(s)-1] == "" {
		s = s[:len(s)-1]
	}
	return s
}
