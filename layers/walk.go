package layers

import (
	"archive/tar"
	"context"
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
// seeking instead of reading. The body handed to fn stops with the
// context's cause once ctx ends: a sparse or huge entry yields bytes
// without reading r, so a check on r alone would not stop it.
func WalkTar(ctx context.Context, r io.Reader, fn WalkFunc) error {
	tr := tar.NewReader(r)
	body := ContextReader(ctx, tr, nil)
	var last string
	for i := 0; ; i++ {
		if err := ctx.Err(); err != nil {
			return context.Cause(ctx)
		}
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
		if err := fn(newEntry(hdr), body); err != nil {
			return err
		}
	}
}

// newEntry reads a tar header as kiln does: its name cleaned (Escapes
// set when it leaves the root), whiteouts and opaque markers recognised.
func newEntry(hdr *tar.Header) *Entry {
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
	return e
}

// xattrNameMax and xattrValueMax are Linux's limits on an extended
// attribute (XATTR_NAME_MAX, XATTR_SIZE_MAX), which EROFS shares: no file
// system a container runs on can hold a longer one.
const (
	xattrNameMax  = 255
	xattrValueMax = 64 << 10
)

// entryTypes are the entry types a layer may hold: what Docker, BuildKit
// and containerd write, each read the same way by every tar reader. Go's
// reader consumes PAX ('x') and GNU long-name ('L', 'K') headers itself.
var entryTypes = map[byte]bool{
	tar.TypeReg: true, tar.TypeLink: true, tar.TypeSymlink: true, tar.TypeChar: true,
	tar.TypeBlock: true, tar.TypeDir: true, tar.TypeFifo: true,
}

// CheckEntry is kiln's one rule for the entries of a layer it turns into
// something else (slim's rewrite, the EROFS conversion, warm's read-back
// of every fetched layer and its --unpack), so that every form of a
// layer holds what the tar form holds. It refuses, in words naming the
// entry:
//   - (CheckPath) a name that is absolute or climbs out of the root with
//     "..", a symlink whose relative target climbs above the root, a hard
//     link whose target leaves it;
//   - (CheckForm, the rest; analyze applies this half) any type but a
//     file, hard link, symlink, device, directory or fifo: GNU sparse
//     files ('S', or PAX GNU.sparse records), volume labels
//     ('V'), contiguous files ('7'), global PAX headers ('g') and the
//     rest are read differently by different tar readers (mkfs.erofs,
//     GNU tar and Go disagree on where their data ends);
//   - a link, device, directory or fifo that declares data (a size):
//     Go's reader reads what follows as entries, mkfs.erofs skips it for
//     devices and fifos, GNU tar for links too;
//   - an extended attribute whose name is over 255 bytes or whose value
//     is over 64 KiB, which no Linux file system holds.
func CheckEntry(e *Entry) error {
	if err := CheckPath(e); err != nil {
		return err
	}
	return CheckForm(e)
}

// CheckPath is the half of CheckEntry about where an entry lands: its
// name, a symlink's or a hard link's target, leaving the image root.
// analyze reports such entries where a runtime puts them, with a warning.
func CheckPath(e *Entry) error {
	h := e.Header
	switch {
	case e.Escapes:
		return fmt.Errorf("entry %q leaves the image root (absolute or ../ path): refusing to rewrite a hostile layer", h.Name)
	case h.Typeflag == tar.TypeSymlink && escapesRoot(e.Path, h.Linkname):
		return fmt.Errorf("symlink %q → %q climbs out of the image root: refusing to rewrite a hostile layer", h.Name, h.Linkname)
	case h.Typeflag == tar.TypeLink && climbsOut(h.Linkname):
		return fmt.Errorf("hardlink %q → %q leaves the image root: refusing to rewrite a hostile layer", h.Name, h.Linkname)
	}
	return nil
}

// CheckForm is the half of CheckEntry about what an entry holds: tar
// readers disagree on it (how much data, which entries follow), so no
// reader of the layer, analyze included, can say what the layer is.
func CheckForm(e *Entry) error {
	h := e.Header
	switch {
	case h.Typeflag == tar.TypeGNUSparse || hasSparseRecords(h):
		return fmt.Errorf("entry %q is a GNU sparse file, which tar readers expand differently: refusing it (rebuild the layer without tar --sparse)", h.Name)
	case !entryTypes[h.Typeflag]:
		return fmt.Errorf("entry %q has tar type %q, which is not a file, link, device, directory or fifo, and which tar readers read differently: refusing it (rebuild the layer with Docker, BuildKit or plain tar)", h.Name, h.Typeflag)
	case h.Typeflag != tar.TypeReg && h.Size != 0:
		return fmt.Errorf("entry %q (tar type %q) declares %d bytes of data, which some tar readers skip and others read as more entries: refusing it (rebuild the layer with Docker, BuildKit or plain tar)", h.Name, h.Typeflag, h.Size)
	}
	return checkXattrs(h)
}

func hasSparseRecords(h *tar.Header) bool {
	for k := range h.PAXRecords {
		if strings.HasPrefix(k, "GNU.sparse.") {
			return true
		}
	}
	return false
}

// checkXattrs applies Linux's limits to h's extended attributes, in both
// spellings a tar carries them.
func checkXattrs(h *tar.Header) error {
	for k, v := range h.PAXRecords {
		name, ok := strings.CutPrefix(k, "SCHILY.xattr.")
		if !ok {
			name, ok = strings.CutPrefix(k, "LIBARCHIVE.xattr.")
		}
		switch {
		case !ok:
		case len(name) > xattrNameMax:
			return fmt.Errorf("entry %q has an extended attribute named %.40q… of %d bytes, over Linux's limit of %d: refusing it", h.Name, name, len(name), xattrNameMax)
		case len(v) > xattrValueMax:
			return fmt.Errorf("entry %q has an extended attribute %q of %d bytes, over Linux's limit of %d: refusing it", h.Name, name, len(v), xattrValueMax)
		}
	}
	return nil
}

// escapesRoot reports whether a relative symlink target climbs above the
// root from the link's directory. Absolute targets are resolved inside the
// root by every runtime, so they are fine.
func escapesRoot(linkPath, target string) bool {
	if strings.HasPrefix(target, "/") {
		return false
	}
	depth := strings.Count(path.Dir(linkPath), "/") + 1
	if path.Dir(linkPath) == "." {
		depth = 0
	}
	return climbs(target, depth)
}

// climbsOut reports whether a name climbs above the root with "..".
// Absolute names are taken as root-relative, as runtimes do.
func climbsOut(name string) bool {
	return climbs(strings.ReplaceAll(name, "\\", "/"), 0)
}

// climbs reports whether the path p, read from depth directories below
// the root, climbs above the root with "..".
func climbs(p string, depth int) bool {
	for _, part := range strings.Split(p, "/") {
		switch part {
		case "", ".":
		case "..":
			if depth--; depth < 0 {
				return true
			}
		default:
			depth++
		}
	}
	return false
}
