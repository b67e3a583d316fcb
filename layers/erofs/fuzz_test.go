package erofs_test

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kiln-build/kiln/internal/testimage"
	"github.com/kiln-build/kiln/layers"
	"github.com/kiln-build/kiln/layers/erofs"
)

// node is one file as a reader of a layer sees it: what the EROFS form
// of a layer must hold for each file Go's tar reader sees.
type node struct {
	typ   byte // a tar type: TypeReg, TypeDir, TypeSymlink, TypeChar, ...
	mode  int64
	size  int64
	sum   string // regular files' content
	link  string // symlinks' target
	major int64
	minor int64
}

func (n node) String() string {
	return fmt.Sprintf("type %q mode %o size %d sum %.12s link %q dev %d:%d", n.typ, n.mode, n.size, n.sum, n.link, n.major, n.minor)
}

// TestErofsDiffSeeds: FuzzErofsMatchesTar's seed corpus holds issue 34's
// hostile layers and an honest one with every kind of entry.
func TestErofsDiffSeeds(t *testing.T) {
	seeds := map[string][]byte{"every-kind": testimage.Tar(t, diffEntries())}
	for name, b := range testimage.HostileTars(t) {
		seeds["issue34-"+name] = b
	}
	testimage.CheckFuzzSeeds(t, "FuzzErofsMatchesTar", seeds)
}

// diffEntries is a small layer with every kind of entry.
func diffEntries() []testimage.Entry {
	return []testimage.Entry{
		testimage.Dir("usr/"), testimage.Dir("usr/bin/"),
		{Name: "usr/bin/su", Body: []byte("#!/bin/sh\n"), Mode: 0o4755},
		{Name: "usr/bin/su2", Type: tar.TypeLink, Linkname: "usr/bin/su"},
		testimage.Symlink("usr/bin/sh", "dash"),
		testimage.Whiteout("etc/gone"), testimage.Opaque("opt"),
		testimage.Sized("opt/x/y.bin", 5000),
		{Name: "dev/fifo", Type: tar.TypeFifo},
	}
}

// FuzzErofsMatchesTar is the EROFS conversion's differential: for a tar
// kiln converts, the files Go's tar reader sees (path, type, mode, size,
// content, link target, device) are the files the EROFS image holds,
// read back by fsck.erofs --extract; a tar Go's reader or kiln's entry
// rule refuses is not converted. Skipped without erofs-utils or root
// (extracting whiteouts makes devices).
func FuzzErofsMatchesTar(f *testing.F) {
	requireDiff(f)
	f.Add(testimage.Tar(f, diffEntries()))
	f.Fuzz(func(t *testing.T, b []byte) { diffCheck(t, b) })
}

// TestErofsMatchesTar: the differential on a layer with every kind of
// entry compares every file (the check is not vacuous).
func TestErofsMatchesTar(t *testing.T) {
	requireDiff(t)
	if !diffCheck(t, testimage.Tar(t, diffEntries())) {
		t.Fatal("nothing compared")
	}
}

func requireDiff(t testing.TB) {
	t.Helper()
	if err := erofs.Check(context.Background()); err != nil {
		t.Skip(err)
	}
	if os.Geteuid() != 0 {
		t.Skip("fsck.erofs --extract makes devices (whiteouts): root only")
	}
}

// diffCheck converts b and compares the image with Go's view of b; it
// says whether it compared (false: refused, ambiguous, or too big).
func diffCheck(t *testing.T, b []byte) bool {
	if len(b) > 64<<10 {
		return false
	}
	want, goErr := goView(b)
	if goErr == errTooBig {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dir := t.TempDir()
	img := filepath.Join(dir, "layer.erofs")
	err := erofs.ConvertFile(ctx, bytes.NewReader(b), img, erofs.WithCompression(erofs.None), erofs.WithTempDir(dir))
	switch {
	case goErr != nil && err == nil:
		t.Fatalf("converted a tar kiln's reader refuses (%v)", goErr)
	case err != nil || want == nil:
		return false // refused, or files the tar names ambiguously
	}
	got := extract(t, ctx, img, filepath.Join(dir, "x"))
	compareViews(t, want, got)
	return true
}

var errTooBig = fmt.Errorf("too big to fuzz cheaply")

// goView is the files Go's tar reader sees in b, through kiln's walk
// and entry rule; nil (and no error) when the tar names a path twice or
// puts a file below a non-directory, which readers resolve differently
// by design (the last entry wins, or the first).
func goView(b []byte) (map[string]node, error) {
	view := map[string]node{}
	ambiguous := false
	var total int64
	err := layers.WalkTar(context.Background(), bytes.NewReader(b), func(e *layers.Entry, body io.Reader) error {
		if err := layers.CheckEntry(e); err != nil {
			return err
		}
		h := e.Header
		if total += h.Size; total > 1<<20 {
			return errTooBig
		}
		p := strings.TrimPrefix(path.Clean("/"+h.Name), "/")
		n := node{typ: h.Typeflag, mode: h.Mode & 0o7777}
		switch {
		case e.Opaque:
			return nil // an xattr on the directory
		case e.Whiteout:
			p = e.Path
			n = node{typ: tar.TypeChar}
		case h.Typeflag == tar.TypeReg:
			s := sha256.New()
			k, err := io.Copy(s, body)
			if err != nil {
				return err
			}
			n.size, n.sum = k, hex.EncodeToString(s.Sum(nil))
		case h.Typeflag == tar.TypeLink:
			target, ok := view[strings.TrimPrefix(path.Clean("/"+h.Linkname), "/")]
			if !ok || target.typ != tar.TypeReg {
				ambiguous = true
				return nil
			}
			n = target
		case h.Typeflag == tar.TypeSymlink:
			n.mode, n.link = 0, h.Linkname
		case h.Typeflag == tar.TypeChar || h.Typeflag == tar.TypeBlock:
			n.major, n.minor = h.Devmajor, h.Devminor
		}
		if p == "" || strings.ContainsAny(p, "\\") {
			ambiguous = ambiguous || p != ""
			return nil
		}
		if _, dup := view[p]; dup {
			ambiguous = true
		}
		view[p] = n
		return nil
	})
	if err != nil {
		return nil, err
	}
	for p := range view {
		for d := path.Dir(p); d != "."; d = path.Dir(d) {
			if n, ok := view[d]; ok && n.typ != tar.TypeDir {
				ambiguous = true
			}
		}
	}
	if ambiguous {
		return nil, nil
	}
	return view, nil
}

// extract reads the EROFS image back with fsck.erofs --extract.
func extract(t *testing.T, ctx context.Context, img, dir string) map[string]node {
	out, err := exec.CommandContext(ctx, erofs.FsckProgram, "--extract="+dir, "--preserve-perms", "--no-preserve-owner", img).CombinedOutput()
	if err != nil {
		t.Fatalf("fsck.erofs --extract: %v: %s", err, out)
	}
	got := map[string]node{}
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		n := node{mode: int64(st.Mode & 0o7777)}
		switch st.Mode & syscall.S_IFMT {
		case syscall.S_IFREG:
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			s := sha256.Sum256(b)
			n.typ, n.size, n.sum = tar.TypeReg, int64(len(b)), hex.EncodeToString(s[:])
		case syscall.S_IFDIR:
			n.typ = tar.TypeDir
		case syscall.S_IFLNK:
			l, err := os.Readlink(p)
			if err != nil {
				return err
			}
			n.typ, n.mode, n.link = tar.TypeSymlink, 0, l
		case syscall.S_IFCHR, syscall.S_IFBLK:
			n.typ = tar.TypeChar
			if st.Mode&syscall.S_IFMT == syscall.S_IFBLK {
				n.typ = tar.TypeBlock
			}
			n.major, n.minor = int64(unix.Major(st.Rdev)), int64(unix.Minor(st.Rdev))
		case syscall.S_IFIFO:
			n.typ = tar.TypeFifo
		}
		got[rel] = n
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// compareViews: every file Go's reader sees is in the image, the same;
// the image holds nothing else but the directories those files need.
func compareViews(t *testing.T, want, got map[string]node) {
	t.Helper()
	for p, w := range want {
		g, ok := got[p]
		if w.typ == tar.TypeChar && w.major == 0 && w.minor == 0 && ok {
			g.mode, w.mode = 0, 0 // a whiteout's mode is the converter's
		}
		if !ok || g != w {
			t.Errorf("%s: Go's tar reader sees %v; the EROFS image holds %v (present %v)", p, w, g, ok)
		}
	}
	for p, g := range got {
		if _, ok := want[p]; ok {
			continue
		}
		if g.typ != tar.TypeDir || !parentOfAny(p, want) {
			t.Errorf("%s: the EROFS image holds %v, which Go's tar reader does not see", p, g)
		}
	}
}

func parentOfAny(dir string, view map[string]node) bool {
	for p := range view {
		if strings.HasPrefix(p, dir+"/") {
			return true
		}
	}
	return false
}
