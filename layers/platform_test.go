package layers

import (
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

func TestPlatformMatches(t *testing.T) {
	p := func(s string) v1.Platform {
		pl, err := ParsePlatform(s)
		if err != nil {
			t.Fatal(err)
		}
		return pl
	}
	for _, tc := range []struct {
		want, got string
		ok        bool
	}{
		{"linux/amd64", "linux/amd64", true},
		{"linux/amd64", "linux/arm64", false},
		{"linux/arm64/v8", "linux/arm64", true}, // an entry that omits the variant
		{"linux/arm64", "linux/arm64/v8", true},
		{"linux/arm/v7", "linux/arm/v6", false},
		{"linux/amd64", "windows/amd64", false},
	} {
		if got := PlatformMatches(p(tc.want), p(tc.got)); got != tc.ok {
			t.Errorf("PlatformMatches(%s, %s) = %v, want %v", tc.want, tc.got, got, tc.ok)
		}
	}
	if platformMatches(p("linux/amd64"), nil) {
		t.Error("an entry without a platform matched")
	}
}
