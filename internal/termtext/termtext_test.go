package termtext

import "testing"

func TestClean(t *testing.T) {
	for in, want := range map[string]string{
		"plain text\n\tindented":     "plain text\n\tindented",
		"\x1b]0;pwned\x07title":      "]0;pwnedtitle",
		"\x1b[2J\x1b[31mred\x1b[0m":  "[2J[31mred[0m",
		"progress 10%\rprogress 99%": "progress 10%progress 99%",
		"c1 \xc2\x9b2J csi":          "c1 2J csi",
		"raw \x9b byte":              "raw \uFFFD byte",
		"bidi \u202egnp.exe":         "bidi gnp.exe",
		"unicode stays: λ → ✓":       "unicode stays: λ → ✓",
	} {
		if got := Clean(in); got != want {
			t.Errorf("Clean(%q) = %q, want %q", in, got, want)
		}
	}
}
