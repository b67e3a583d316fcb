package main

import (
	"archive/tar"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"sort"
	"syscall"
	"time"
)

// OCI whiteout conventions (image-spec layer.md).
const (
	whiteoutPrefix = ".wh."
	opaqueMarker   = ".wh..wh..opq"
)

// Entry describes one tar entry as it is written; TarOptions.OnEntry receives
// every entry in tar order so callers can account for layer content without
// a second walk.
type Entry struct {
	// Name is the path inside the image without a leading slash
	// ("usr/bin/nvcc"); directories have no trailing slash here.
	Name     string
	Typeflag byte
	// Size is the number of content bytes written for the entry (regular
	// files only; hardlinks, whiteouts and everything else have 0).
	Size     int64
	Linkname string
	// Deleted is set for whiteout entries: the image path the whiteout
	// removes from lower layers ("var/lib/apt/lists/lock"). For an opaque
	// directory marker it is the directory whose lower content is hidden and
	// Opaque is true.
	Deleted string
	Opaque  bool
}

// TarOptions controls WriteTar.
type TarOptions struct {
	// ModTime is stamped on every entry (SOURCE_DATE_EPOCH).
	ModTime time.Time
	// OnEntry, when set, is called for every entry written.
	OnEntry func(Entry)
	// LowerDirs are the root directories of the layers below this one.
	// When set, an overlayfs-opaque directory only gets a ".wh..wh..opq"
	// marker if some lower layer has a directory at that path: overlayfs
	// also marks brand-new directories opaque (a lookup optimisation), and
	// those markers would hide nothing.
	LowerDirs []string
}

// WriteTar streams the directory tree at root into w as an OCI layer tar.
//
// The output is deterministic: entries are sorted by name (a directory comes
// before its contents), every mtime is opts.ModTime, uid/gid/mode are taken
// from the file system, user/group names are left empty and extended
// attributes are dropped. Symlinks are kept as symlinks; a regular file with
// several links inside root is written once and later names become hardlink
// entries pointing at the first name. Device nodes and sockets are skipped,
// except overlayfs whiteouts (character devices 0/0), which become OCI
// ".wh.<name>" entries; directories marked opaque by overlayfs
// (trusted.overlay.opaque=y or user.overlay.opaque=y) get a ".wh..wh..opq"
// entry right after the directory itself (see TarOptions.LowerDirs). File contents are copied straight
// from disk, so a layer is never held in memory.
func WriteTar(w io.Writer, root string, opts TarOptions) error {
	tw := tar.NewWriter(w)
	tx := &tarWalker{tw: tw, root: root, opts: opts, links: map[fileID]string{}}
	if err := tx.dir(root, ""); err != nil {
		return err
	}
	return tw.Close()
}

type fileID struct{ dev, ino uint64 }

type tarWalker struct {
	tw    *tar.Writer
	root  string
	opts  TarOptions
	links map[fileID]string
}

func (t *tarWalker) emit(hdr *tar.Header, e Entry) error {
	hdr.ModTime = t.opts.ModTime
	hdr.Uname, hdr.Gname = "", ""
	if err := t.tw.WriteHeader(hdr); err != nil {
		return fmt.Errorf("tar header %s: %w", hdr.Name, err)
	}
	if t.opts.OnEntry != nil {
		t.opts.OnEntry(e)
	}
	return nil
}

// dir writes the contents of the directory dirPath, whose image path is rel
// ("" for the root).
func (t *tarWalker) dir(dirPath, rel string) error {
	ents, err := os.ReadDir(dirPath)
	if err != nil {
		return err
	}
	sort.Slice(ents, func(i, j int) bool { return ents[i].Name() < ents[j].Name() })
	for _, de := range ents {
		if err := t.one(filepath.Join(dirPath, de.Name()), path.Join(rel, de.Name()), de.Name()); err != nil {
			return err
		}
	}
	return nil
}

func (t *tarWalker) one(p, rel, base string) error {
	fi, err := os.Lstat(p)
	if err != nil {
		return err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fmt.Errorf("%s: no stat_t", p)
	}
	hdr := &tar.Header{
		Name: rel,
		Mode: int64(st.Mode & 0o7777),
		Uid:  int(st.Uid),
		Gid:  int(st.Gid),
	}
	e := Entry{Name: rel}
	switch st.Mode & syscall.S_IFMT {
	case syscall.S_IFDIR:
		hdr.Typeflag = tar.TypeDir
		hdr.Name = rel + "/"
		e.Typeflag = tar.TypeDir
		if err := t.emit(hdr, e); err != nil {
			return err
		}
		if isOpaque(p) && t.hidesLower(rel) {
			oh := &tar.Header{Name: path.Join(rel, opaqueMarker), Typeflag: tar.TypeReg, Mode: 0o644}
			if err := t.emit(oh, Entry{Name: oh.Name, Typeflag: tar.TypeReg, Deleted: rel, Opaque: true}); err != nil {
				return err
			}
		}
		return t.dir(p, rel)
	case syscall.S_IFREG:
		id := fileID{uint64(st.Dev), uint64(st.Ino)}
		if st.Nlink > 1 {
			if first, ok := t.links[id]; ok {
				hdr.Typeflag = tar.TypeLink
				hdr.Linkname = first
				e.Typeflag, e.Linkname = tar.TypeLink, first
				return t.emit(hdr, e)
			}
			t.links[id] = rel
		}
		hdr.Typeflag = tar.TypeReg
		hdr.Size = st.Size
		e.Typeflag, e.Size = tar.TypeReg, st.Size
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := t.emit(hdr, e); err != nil {
			return err
		}
		if _, err := io.CopyN(t.tw, f, st.Size); err != nil {
			return fmt.Errorf("copy %s: %w", p, err)
		}
		return nil
	case syscall.S_IFLNK:
		target, err := os.Readlink(p)
		if err != nil {
			return err
		}
		hdr.Typeflag = tar.TypeSymlink
		hdr.Linkname = target
		e.Typeflag, e.Linkname = tar.TypeSymlink, target
		return t.emit(hdr, e)
	case syscall.S_IFCHR:
		if st.Rdev != 0 {
			return nil // a real device node: not image content
		}
		// overlayfs whiteout -> OCI whiteout file
		name := path.Join(path.Dir(rel), whiteoutPrefix+base)
		wh := &tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644}
		return t.emit(wh, Entry{Name: name, Typeflag: tar.TypeReg, Deleted: rel})
	case syscall.S_IFIFO:
		hdr.Typeflag = tar.TypeFifo
		e.Typeflag = tar.TypeFifo
		return t.emit(hdr, e)
	default: // sockets, block devices
		return nil
	}
}

func (t *tarWalker) hidesLower(rel string) bool {
	if t.opts.LowerDirs == nil {
		return true
	}
	for _, l := range t.opts.LowerDirs {
		if fi, err := os.Lstat(filepath.Join(l, rel)); err == nil && fi.IsDir() {
			return true
		}
	}
	return false
}

func isOpaque(dir string) bool {
	buf := make([]byte, 8)
	for _, attr := range []string{"trusted.overlay.opaque", "user.overlay.opaque"} {
		n, err := syscall.Getxattr(dir, attr, buf)
		if err == nil && n == 1 && buf[0] == 'y' {
			return true
		}
	}
	return false
}
