// Package termtext makes text from sources kiln does not control (a
// registry's error body, an image's labels and annotations, a remote
// host's or a node's output) safe to print on a terminal.
package termtext

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// Clean returns s without control characters other than newline and tab:
// no escape sequence (CSI, OSC, a C1 control), carriage return or bell
// reaches the terminal, so a hostile source cannot retitle the window,
// clear the screen or overwrite what kiln printed. Bytes that are not
// UTF-8 become U+FFFD.
func Clean(s string) string {
	if utf8.ValidString(s) && !strings.ContainsFunc(s, unsafe) {
		return s
	}
	return strings.Map(func(r rune) rune {
		if unsafe(r) {
			return -1
		}
		return r
	}, s)
}

func unsafe(r rune) bool {
	return r != '\n' && r != '\t' && unicode.IsControl(r) || unicode.Is(unicode.Bidi_Control, r)
}
