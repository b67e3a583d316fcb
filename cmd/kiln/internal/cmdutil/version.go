package cmdutil

import (
	"fmt"
	"regexp"
	"runtime"
	"runtime/debug"
	"strings"
)

// BuildInfo is what kiln knows about its own build: the module version
// (set by go install MODULE@VERSION, or a pseudo-version for a build in a
// git checkout), the commit and its time, whether the work tree had
// uncommitted changes, and the Go version. It comes from the build info
// the Go toolchain embeds; link-time values (-ldflags -X) override it.
type BuildInfo struct {
	Version   string `json:"version"`
	Commit    string `json:"commit,omitempty"`
	Date      string `json:"date,omitempty"`
	Modified  bool   `json:"modified"`
	GoVersion string `json:"go"`
	Platform  string `json:"platform"`
}

// NewBuildInfo reads bi (runtime/debug.ReadBuildInfo's answer; nil when
// the binary has none) and applies the link-time overrides version,
// commit and date (empty, or "dev" for version, means no override).
func NewBuildInfo(bi *debug.BuildInfo, version, commit, date string) BuildInfo {
	b := BuildInfo{Version: "dev", GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if bi != nil {
		if v := bi.Main.Version; v != "" && v != "(devel)" {
			b.Version = v
		}
		if bi.GoVersion != "" {
			b.GoVersion = bi.GoVersion
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				b.Commit = s.Value
			case "vcs.time":
				b.Date = s.Value
			case "vcs.modified":
				b.Modified = s.Value == "true"
			case "GOOS":
				b.Platform = s.Value + b.Platform[strings.Index(b.Platform, "/"):]
			case "GOARCH":
				b.Platform = b.Platform[:strings.Index(b.Platform, "/")+1] + s.Value
			}
		}
	}
	if version != "" && version != "dev" {
		b.Version = version
	}
	if commit != "" {
		b.Commit = commit
	}
	if date != "" {
		b.Date = date
	}
	return b
}

// String is kiln version's text: the version on the first line, then the
// commit, its date and the Go toolchain.
func (b BuildInfo) String() string {
	var s strings.Builder
	fmt.Fprintf(&s, "kiln %s\n", b.Version)
	if b.Commit != "" {
		mod := ""
		if b.Modified {
			mod = " (modified)"
		}
		fmt.Fprintf(&s, "  commit  %s%s\n", b.Commit, mod)
	}
	if b.Date != "" {
		fmt.Fprintf(&s, "  date    %s\n", b.Date)
	}
	fmt.Fprintf(&s, "  go      %s %s\n", b.GoVersion, b.Platform)
	return s.String()
}

// releaseVersion is a release's module version (v1.2.3, v1.2.3-rc.1),
// not a pseudo-version (v0.0.0-20261202163000-0123456789ab) or a build
// with +dirty or +incompatible metadata.
var (
	releaseVersion = regexp.MustCompile(`^v\d+\.\d+\.\d+(-[0-9A-Za-z.]+)?$`)
	pseudoVersion  = regexp.MustCompile(`\d{14}-[0-9a-f]{12}$`)
)

// IsRelease says whether v names a published release of kiln.
func IsRelease(v string) bool {
	return releaseVersion.MatchString(v) && !pseudoVersion.MatchString(v)
}
