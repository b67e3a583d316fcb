// Package shellword splits shell command lines the way kiln needs to read
// them: at separators outside single and double quotes, as written.
package shellword

import "strings"

// Split cuts s at each rune sep says is a separator and that lies outside
// quotes. The parts keep their quotes and may be empty (two separators in
// a row); the separators are dropped.
func Split(s string, sep func(rune) bool) []string {
	var out []string
	var cur strings.Builder
	var quote rune
	for _, r := range s {
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			}
		case r == '\'' || r == '"':
			quote = r
		case sep(r):
			out = append(out, cur.String())
			cur.Reset()
			continue
		}
		cur.WriteRune(r)
	}
	return append(out, cur.String())
}

// Blank says whether r separates a command's words: a space or a tab.
func Blank(r rune) bool { return r == ' ' || r == '\t' }

// Words is s's words, at blanks outside quotes, each as written (quotes
// kept).
func Words(s string) []string {
	var out []string
	for _, w := range Split(s, Blank) {
		if w != "" {
			out = append(out, w)
		}
	}
	return out
}

// Unquote is a word without its quotes, as the shell passes it on: 'a b'
// is a b, "" is the empty word.
func Unquote(w string) string {
	var b strings.Builder
	var quote rune
	for _, r := range w {
		switch {
		case quote != 0 && r == quote:
			quote = 0
			continue
		case quote == 0 && (r == '\'' || r == '"'):
			quote = r
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}
