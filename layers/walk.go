package layers

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"
)

// Whiteout prefixes from the OCI image spec's layer changeset rules.
const (
	whiteoutPrefix = ".wh."
	opaqueMarker   = ".wh..wh..opq"
)

// Entry is one tar header of a layer, with its path made safe to reason
// about.
type Entry struct {
	// Path is the cleaned path inside the image root without a leading
	// slash ("usr/bin/nvcc"). For a whiteout it is the path being deleted;
	// for an opaque marker it is the directory being made opaque.
	Path string
	// Header is the raw tar header; Header.Name is what the archive said.
	Header *tar.Header
	// Whiteout marks a ".wh.NAME" entry that deletes Path from lower layers.
	Whiteout bool
	// Opaque marks a ".wh..wh..opq" entry: lower layers' contents of Path
	// are hidden.
	Opaque bool
	// Escapes is true when the raw name was absolute or climbed out of the
	// root with "..": Path is clamped to the root, and a caller that
	// extracts files must refuse the entry.
	Escapes bool
}

// IsRegular reports whether the entry carries file content.
func (e *Entry) IsRegular() bool {
	// Go's tar reader already maps the old '\x00' type to TypeReg.
	return e.Header.Typeflag == tar.TypeReg
}

// CleanPath turns a tar entry name into a root-relative path. escapes is true
// when the name was absolute or tried to leave the root.
func CleanPath(name string) (clean string, escapes bool) {
	n := strings.ReplaceAll(name, "\\", "/")
	if strings.HasPrefix(n, "/") {
		escapes = true
	}
	// Walk the components ourselves so "a/../../x" is caught even though
	// path.Clean("/"+name) would silently clamp it.
	depth := 0
	for _, part := range strings.Split(n, "/") {
		switch part {
		case "", ".":
		case "..":
			if depth == 0 {
				escapes = true
			} else {
				depth--
			}
		default:
			depth++
		}
	}
	clean = strings.TrimPrefix(path.Clean("/"+n), "/")
	return clean, escapes
}

// ErrUnsafePath is returned by SafeJoin for names that leave the root.
var ErrUnsafePath = errors.New("path leaves the destination")

// SafeJoin joins a tar entry name onto dir for extraction, refusing names
// that are absolute or climb out of dir.
func SafeJoin(dir, name string) (string, error) {
	clean, escapes := CleanPath(name)
	if escapes || clean == "" {
		return "", fmt.Errorf("%q: %w", name, ErrUnsafePath)
	}
	return dir + "/" + clean, nil
}

// WalkFunc is called for every entry of a layer. body reads the entry's
// content; a callback that does not read it costs nothing when the layer is
// seekable. Returning a non-nil error stops the walk.
type WalkFunc func(e *Entry, body io.Reader) error

// WalkTar reads a tar stream entry by entry. When r is an io.Seeker (an
// uncompressed layer in a local file), unread file contents are skipped by
// seeking instead of reading.
func WalkTar(r io.Reader, fn WalkFunc) error {
	tr := tar.NewReader(r)
	var last string
	for i := 0; ; i++ {
		hdr, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			if last == "" {
				return fmt.Errorf("reading tar entry %d: %w", i, err)
			}
			return fmt.Errorf("reading tar entry %d (after %q): %w", i, last, err)
		}
		last = hdr.Name
		e := &Entry{Header: hdr}
		e.Path, e.Escapes = CleanPath(hdr.Name)
		dir, base := path.Split(e.Path)
		dir = strings.TrimSuffix(dir, "/")
		switch {
		case base == opaqueMarker:
			e.Opaque = true
			e.Path = dir
		case strings.HasPrefix(base, whiteoutPrefix):
			e.Whiteout = true
			e.Path = path.Join(dir, strings.TrimPrefix(base, whiteoutPrefix))
		}
		if err := fn(e, tr); err != nil {
			return err
		}
	}
}
