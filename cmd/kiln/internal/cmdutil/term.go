package cmdutil

import (
	"io"
	"os"

	"golang.org/x/term"

	"github.com/kiln-build/kiln/internal/termtable"
)

// IsTerminal reports whether w is a terminal.
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// TermWidth is w's width in columns: the terminal's, or 80 when w is
// not a terminal (a pipe, a file, a CI log).
func TermWidth(w io.Writer) int {
	if f, ok := w.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		if n, _, err := term.GetSize(int(f.Fd())); err == nil && n > 0 {
			return n
		}
	}
	return termtable.DefaultWidth
}

// ColorEnabled reports whether output to w may be coloured: a terminal,
// NO_COLOR unset or empty (https://no-color.org), and TERM not dumb.
func ColorEnabled(w io.Writer) bool {
	return IsTerminal(w) && os.Getenv("NO_COLOR") == "" && os.Getenv("TERM") != "dumb"
}

// TableOptions is how a table written to w is drawn: w's width, colour
// when ColorEnabled.
func TableOptions(w io.Writer) []termtable.Option {
	return []termtable.Option{termtable.Width(TermWidth(w)), termtable.Color(ColorEnabled(w))}
}
