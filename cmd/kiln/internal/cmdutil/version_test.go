package cmdutil

import (
	"runtime/debug"
	"strings"
	"testing"
)

// TestNewBuildInfo: the version, commit, date and modified flag come from
// the build info the toolchain embeds (go install MODULE@VERSION, a VCS
// stamp); -ldflags -X values override them.
func TestNewBuildInfo(t *testing.T) {
	bi := &debug.BuildInfo{
		GoVersion: "go1.26.8",
		Main:      debug.Module{Path: "github.com/kiln-build/kiln", Version: "v1.4.0"},
		Settings: []debug.BuildSetting{
			{Key: "GOOS", Value: "linux"}, {Key: "GOARCH", Value: "arm64"},
			{Key: "vcs.revision", Value: "0123456789abcdef0123456789abcdef01234567"},
			{Key: "vcs.time", Value: "2026-12-01T10:00:00Z"},
			{Key: "vcs.modified", Value: "true"},
		},
	}
	got := NewBuildInfo(bi, "", "", "")
	want := BuildInfo{Version: "v1.4.0", Commit: "0123456789abcdef0123456789abcdef01234567",
		Date: "2026-12-01T10:00:00Z", Modified: true, GoVersion: "go1.26.8", Platform: "linux/arm64"}
	if got != want {
		t.Errorf("from build info:\n got %+v\nwant %+v", got, want)
	}
	s := got.String()
	for _, w := range []string{"kiln v1.4.0\n", "0123456789abcdef0123456789abcdef01234567 (modified)", "2026-12-01T10:00:00Z", "go1.26.8 linux/arm64"} {
		if !strings.Contains(s, w) {
			t.Errorf("String() lacks %q:\n%s", w, s)
		}
	}

	o := NewBuildInfo(bi, "v2.0.0-rc.1", "fedcba", "2026-12-02T00:00:00Z")
	if o.Version != "v2.0.0-rc.1" || o.Commit != "fedcba" || o.Date != "2026-12-02T00:00:00Z" {
		t.Errorf("link-time overrides not applied: %+v", o)
	}

	// go build in a checkout without VCS stamping: (devel), no commit.
	d := NewBuildInfo(&debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}}, "dev", "", "")
	if d.Version != "dev" || d.Commit != "" || strings.Contains(d.String(), "commit") {
		t.Errorf("devel build: %+v\n%s", d, d.String())
	}
}

func TestIsRelease(t *testing.T) {
	for v, want := range map[string]bool{
		"v1.2.3": true, "v1.2.3-rc.1": true, "dev": false, "": false,
		"v0.0.0-20261202163000-0123456789ab":       false,
		"v1.2.4-0.20261202163000-0123456789ab":     false,
		"v1.2.3+dirty":                             false,
		"v0.0.0-20261202163000-0123456789ab+dirty": false,
	} {
		if got := IsRelease(v); got != want {
			t.Errorf("IsRelease(%q) = %v, want %v", v, got, want)
		}
	}
}
