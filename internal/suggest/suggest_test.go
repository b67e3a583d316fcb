package suggest

import "testing"

func TestNearest(t *testing.T) {
	for typed, want := range map[string]string{"targt": "target", "platfrom": "platform", "zzzzzz": "", "target": "target"} {
		if got := Nearest(typed, []string{"target", "platform", "json"}); got != want {
			t.Errorf("Nearest(%q) = %q, want %q", typed, got, want)
		}
	}
	if d := Distance("kitten", "sitting"); d != 3 {
		t.Errorf("Distance = %d", d)
	}
}
