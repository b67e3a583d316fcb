package shellword

import (
	"reflect"
	"strings"
	"testing"
)

func TestSplitWordsUnquote(t *testing.T) {
	line := `pip install "torch==2.6" && python -c 'import a; print(1)' | tee  x`
	if got, want := Split(line, func(r rune) bool { return strings.ContainsRune(";&|", r) }),
		[]string{`pip install "torch==2.6" `, ``, ` python -c 'import a; print(1)' `, ` tee  x`}; !reflect.DeepEqual(got, want) {
		t.Errorf("Split = %q, want %q", got, want)
	}
	if got, want := Words(`kiln slim  IMAGE --probe 'python3 -c "import torch"' ""`),
		[]string{"kiln", "slim", "IMAGE", "--probe", `'python3 -c "import torch"'`, `""`}; !reflect.DeepEqual(got, want) {
		t.Errorf("Words = %q, want %q", got, want)
	}
	for in, want := range map[string]string{`'a b'`: "a b", `""`: "", `x"y 'z'"w`: "xy 'z'w", `plain`: "plain"} {
		if got := Unquote(in); got != want {
			t.Errorf("Unquote(%q) = %q, want %q", in, got, want)
		}
	}
}
