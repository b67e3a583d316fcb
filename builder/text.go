package builder

import (
	"fmt"
	"io"
	"strings"
	"unicode/utf8"

	"github.com/kiln-build/kiln/internal/bytesize"
	"github.com/kiln-build/kiln/internal/termtable"
)

// WriteWheels prints what the wheel cache did, a line per compiled wheel
// (80 columns).
func WriteWheels(w io.Writer, uses []WheelUse) {
	for _, u := range uses {
		what := "compiled, not cached"
		switch {
		case u.Cached && u.Wider:
			what = "from the cache (wider archs " + strings.Join(u.Key.Archs, ";") + ")"
		case u.Cached:
			what = "from the cache, " + bytesize.Format(u.Size) + ", not compiled"
		case u.Pushed:
			what = "compiled, pushed, " + bytesize.Format(u.Size)
		}
		fmt.Fprintf(w, "wheel    %s %s: %s\n", u.Package, u.Platform, what)
		if u.Ref != "" {
			fmt.Fprintf(w, "  ref    %s\n", shortRef(u.Ref))
		}
	}
}

// shortRef keeps a wheel's REPO:TAG within 80 columns after its
// 9-column label: the tag's hash is cut to 12 hex digits (the key's full
// digest is in --json), then the repository's middle path elided.
func shortRef(ref string) string {
	const width = 71
	if i := strings.LastIndex(ref, "-"); i >= 0 && len(ref)-i-1 == 64 {
		ref = ref[:i+13] + "…"
	}
	if utf8.RuneCountInString(ref) <= width {
		return ref
	}
	host, rest, _ := strings.Cut(ref, "/")
	if j := strings.LastIndex(rest, "/"); j >= 0 {
		ref = host + "/…" + rest[j:]
	}
	return ref
}

// warnWheels says which compiled wheels did not reach the cache, and why.
func warnWheels(w io.Writer, uses []WheelUse) {
	for _, u := range uses {
		if !u.Cached && !u.Pushed && u.Note != "" {
			fmt.Fprintf(w, "warning: %s %s: %s\n", u.Package, u.Platform, u.Note)
		}
	}
}

// WriteText prints e within 80 columns.
func (e *Explanation) WriteText(w io.Writer) {
	const width = termtable.DefaultWidth
	line := func(first, s string) { termtable.Fprintw(w, width, first, "         ", s) }
	against := e.Against
	if e.AgainstDigest != "" {
		against += " (" + termtable.Digest(e.AgainstDigest) + ")"
	}
	line("explain  ", "against "+against)
	if e.Note != "" {
		line("         ", e.Note)
	}
	if e.Reused {
		line("         ", "no-op: answered from the content tag "+e.ContentTag+"; nothing was built (--rebuild builds)")
	}
	hits := 0
	for _, s := range e.Steps {
		if s.Hit {
			hits++
		}
	}
	line("steps    ", fmt.Sprintf("%d of %d hit", hits, len(e.Steps)))
	for _, s := range e.Steps {
		mark := "  hit   "
		if !s.Hit {
			mark = "  miss  "
		}
		line(mark, s.Name)
		if s.Why != "" {
			line("          ", s.Why)
		}
	}
	for _, c := range e.Changes {
		line("changed  ", c.Input+": "+c.What)
	}
	if c := e.Cost; c != nil {
		line("cost     ", fmt.Sprintf("%d of %d layers new: %s to push, %s every host pulls again (%s of layers unchanged)",
			c.NewLayers, c.Layers, bytesize.Format(c.PushBytes), bytesize.Format(c.PullBytes), bytesize.Format(c.SameBytes)))
	}
	if e.AppOnly {
		line("         ", "app-only change: the app layer is content-addressed, so only it is pushed and pulled again; every other layer is the same blob")
	}
}
