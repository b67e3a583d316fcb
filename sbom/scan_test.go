package sbom

import "testing"

// Issue 27 (minor): pypi purls kept "/" (and "+") unencoded: a hostile
// METADATA name could add path segments to the purl.
func TestPyPIPURLEncodesSegments(t *testing.T) {
	for _, tc := range []struct{ name, version, want string }{
		{"Torch", "2.6.0+cu124", "pkg:pypi/torch@2.6.0%2Bcu124"},
		{"flash_attn", "2.7.4.post1", "pkg:pypi/flash-attn@2.7.4.post1"},
		{"evil/../pkg", "1.0/../2", "pkg:pypi/evil%2F-%2Fpkg@1.0%2F..%2F2"},
	} {
		if got := PyPIPURL(tc.name, tc.version); got != tc.want {
			t.Errorf("PyPIPURL(%q, %q) = %q, want %q", tc.name, tc.version, got, tc.want)
		}
	}
}
