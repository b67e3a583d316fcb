package testkit

import (
	"strings"

	"github.com/kiln-build/kiln/internal/termtable"
)

// Fits says whether a line of kiln's output fits width columns as a
// person at that terminal needs it: within width, or one value that
// cannot be broken (no space in it, 40 columns or more: a reference with
// its digest, a digest, a path) alone or after a label of at most 14
// columns ("image       REF@DIGEST", "slim REF", in a snippet a person
// pastes "# REF", "- REF", or a shell command continued "    REF \\"),
// which termtable.Wrap keeps whole on purpose so that it copies whole.
func Fits(line string, width int) bool {
	if termtable.Len(line) <= width {
		return true
	}
	line = strings.TrimSuffix(line, " \\") // a shell command continued
	i := strings.LastIndexAny(line, " \t")
	head, last := line[:i+1], line[i+1:]
	if termtable.Len(last) < 40 {
		return false
	}
	// Alone, or after its label ("image", "#", "-", "slim"), indented.
	return termtable.Len(strings.TrimSpace(head)) <= 14
}

// Flat is s with each run of white space as one space: what a check for
// words in kiln's output matches, when kiln wraps it at 80 columns.
func Flat(s string) string { return strings.Join(strings.Fields(s), " ") }
