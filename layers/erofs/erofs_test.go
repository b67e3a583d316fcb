package erofs_test

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"golang.org/x/sys/unix"

	"github.com/kiln-build/kiln/internal/testimage"
	"github.com/kiln-build/kiln/internal/testkit"
	"github.com/kiln-build/kiln/layers/erofs"
)

// capability is a file capability (cap_net_raw+ep), as ping carries it.
const capability = "\x01\x00\x00\x02\x00\x20\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"

// layerEntries is one layer with every kind of entry a container image
// has, whiteouts and an opaque directory included.
func layerEntries() []testimage.Entry {
	return []testimage.Entry{
		testimage.Dir("usr"),
		testimage.Dir("usr/bin"),
		{Name: "usr/bin/su", Body: []byte("#!/bin/sh\necho su\n"), Mode: 0o4755},
		{Name: "usr/bin/su-again", Type: tar.TypeLink, Linkname: "usr/bin/su"},
		testimage.Symlink("usr/bin/sh", "dash"),
		{Name: "usr/bin/ping", Body: []byte("ping"), Mode: 0o755, Xattrs: map[string]string{"security.capability": capability}},
		testimage.Dir("etc"),
		testimage.Whiteout("etc/removed.conf"),
		testimage.Dir("opt"),
		testimage.Opaque("opt"),
		testimage.Sized("opt/new.bin", 100_000),
		// A zeroed GPU kernel: 16 MiB of zeros between real bytes.
		{Name: "usr/lib/libzeroed.so", Body: append(append([]byte("ELF"), make([]byte, 16<<20)...), "end"...)},
	}
}

func convert(t *testing.T, tarball []byte, opts ...erofs.Option) []byte {
	t.Helper()
	var out bytes.Buffer
	n, err := erofs.Convert(context.Background(), bytes.NewReader(tarball), &out, opts...)
	if err != nil {
		t.Fatal(err)
	}
	if n != int64(out.Len()) {
		t.Fatalf("Convert said %d bytes, wrote %d", n, out.Len())
	}
	return out.Bytes()
}

// mountImage mounts an image read-only (the kernel reads EROFS from a
// file), or skips when this is not root or the kernel has no EROFS.
func mountImage(t *testing.T, image []byte) string {
	t.Helper()
	dir := t.TempDir()
	file := filepath.Join(dir, "layer.erofs")
	if err := os.WriteFile(file, image, 0o644); err != nil {
		t.Fatal(err)
	}
	mnt := filepath.Join(dir, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("mount", "-t", "erofs", "-o", "ro,loop", file, mnt).CombinedOutput()
	if err != nil {
		if os.Getenv("KILN_REQUIRE_EROFS") == "1" && os.Geteuid() == 0 {
			t.Fatalf("mount -t erofs: %v: %s", err, out)
		}
		t.Skipf("cannot mount EROFS here (%v: %s)", err, strings.TrimSpace(string(out)))
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", mnt).CombinedOutput(); err != nil {
			t.Errorf("umount: %v: %s", err, out)
		}
	})
	return mnt
}

// TestConvertKeepsTheLayer mounts the image and finds the tar's files as
// a container would: contents, modes (setuid), a hard link as one inode, a
// symlink, a capability xattr, and the whiteout and opaque directory as
// overlayfs (and so containerd's EROFS snapshotter) reads them.
func TestConvertKeepsTheLayer(t *testing.T) {
	testkit.RequireErofs(t)
	entries := layerEntries()
	mnt := mountImage(t, convert(t, testimage.Tar(t, entries)))

	for _, e := range entries {
		if e.Type != 0 || strings.Contains(e.Name, ".wh.") {
			continue
		}
		got, err := os.ReadFile(filepath.Join(mnt, e.Name))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, e.Body) {
			t.Errorf("%s: %d bytes differ from the tar's %d", e.Name, len(got), len(e.Body))
		}
	}
	su, err := os.Stat(filepath.Join(mnt, "usr/bin/su"))
	if err != nil {
		t.Fatal(err)
	}
	if su.Mode()&os.ModeSetuid == 0 || su.Mode().Perm() != 0o755 {
		t.Errorf("usr/bin/su mode %v, want setuid 0755", su.Mode())
	}
	again, err := os.Stat(filepath.Join(mnt, "usr/bin/su-again"))
	if err != nil {
		t.Fatal(err)
	}
	if !os.SameFile(su, again) {
		t.Error("the hard link usr/bin/su-again is not usr/bin/su's inode")
	}
	if l, err := os.Readlink(filepath.Join(mnt, "usr/bin/sh")); err != nil || l != "dash" {
		t.Errorf("usr/bin/sh -> %q (%v), want dash", l, err)
	}
	if got := xattr(t, filepath.Join(mnt, "usr/bin/ping"), "security.capability"); got != capability {
		t.Errorf("usr/bin/ping security.capability = %q, want %q", got, capability)
	}
	if got := xattr(t, filepath.Join(mnt, "opt"), "trusted.overlay.opaque"); got != "y" {
		t.Errorf("opt: trusted.overlay.opaque = %q, want y (the opaque marker)", got)
	}
	if _, err := os.Lstat(filepath.Join(mnt, "opt/.wh..wh..opq")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the opaque marker file is in the image: %v", err)
	}
	var st unix.Stat_t
	if err := unix.Lstat(filepath.Join(mnt, "etc/removed.conf"), &st); err != nil {
		t.Fatalf("the whiteout of etc/removed.conf is not an overlayfs whiteout: %v", err)
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFCHR || st.Rdev != 0 {
		t.Errorf("etc/removed.conf: mode %o rdev %d, want a 0/0 character device", st.Mode, st.Rdev)
	}
	if _, err := os.Lstat(filepath.Join(mnt, "etc/.wh.removed.conf")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the whiteout file is in the image: %v", err)
	}
}

func xattr(t *testing.T, path, name string) string {
	t.Helper()
	buf := make([]byte, 256)
	n, err := unix.Lgetxattr(path, name, buf)
	if err != nil {
		t.Fatalf("%s: getxattr %s: %v", path, name, err)
	}
	return string(buf[:n])
}

// TestConvertIsReproducible: the same tar gives the same bytes, at any
// time; the UUID is containerd's derivation from the diff ID.
func TestConvertIsReproducible(t *testing.T) {
	testkit.RequireErofs(t)
	tarball := testimage.Tar(t, layerEntries())
	diffID := v1.Hash{Algorithm: "sha256", Hex: sha(tarball)}
	a := convert(t, tarball, erofs.WithDiffID(diffID))
	b := convert(t, tarball, erofs.WithDiffID(diffID))
	if !bytes.Equal(a, b) {
		t.Fatalf("two conversions of one tar differ: sha256 %s and %s", sha(a), sha(b))
	}
	other := convert(t, tarball, erofs.WithDiffID(v1.Hash{Algorithm: "sha256", Hex: strings.Repeat("0", 64)}))
	if bytes.Equal(a, other) {
		t.Error("the diff ID does not reach the image (its UUID)")
	}
}

// TestUUIDMatchesContainerd: containerd's converter names an image
// uuid.NewSHA1(uuid.NameSpaceURL, "erofs:blobs/"+diffID) (the value here
// is Python's uuid.uuid5 of the same), so both conversions agree.
func TestUUIDMatchesContainerd(t *testing.T) {
	d := v1.Hash{Algorithm: "sha256", Hex: strings.Repeat("a", 64)}
	if got, want := erofs.UUID(d), "9c845a66-a812-5bd9-89af-605eeeb9f05a"; got != want {
		t.Errorf("UUID(%s) = %s, want %s", d, got, want)
	}
}

func sha(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// TestConvertZerosCostNoDisk: 16 MiB of zeroed GPU code costs almost
// nothing in the default (compressed) image, and all of it uncompressed.
func TestConvertZerosCostNoDisk(t *testing.T) {
	testkit.RequireErofs(t)
	tarball := testimage.Tar(t, layerEntries())
	compressed := convert(t, tarball)
	if len(compressed) > 1<<20 {
		t.Errorf("default image is %d bytes for 16 MiB of zeros and 100 kB of data", len(compressed))
	}
	plain := convert(t, tarball, erofs.WithCompression(erofs.None))
	if len(plain) < 16<<20 {
		t.Errorf("uncompressed image is %d bytes, smaller than its 16 MiB file", len(plain))
	}
}

// TestConvertFileIsAtomic: a tar kiln refuses leaves no file; a
// good one replaces the destination whole.
func TestConvertFileIsAtomic(t *testing.T) {
	testkit.RequireErofs(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "layer.erofs")
	err := erofs.ConvertFile(context.Background(), strings.NewReader(strings.Repeat("not a tar ", 200)), path)
	if err == nil || !strings.Contains(err.Error(), "not a tar kiln can read") {
		t.Fatalf("a broken tar: err = %v", err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Fatalf("a failed conversion left %v", ents[0].Name())
	}
	tarball := testimage.Tar(t, layerEntries())
	if err := erofs.ConvertFile(context.Background(), bytes.NewReader(tarball), path); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if want := convert(t, tarball); !bytes.Equal(got, want) {
		t.Error("ConvertFile and Convert wrote different images")
	}
}

// TestConvertReadsToTheEnd: the tar's reader is read to EOF, so a reader
// that verifies a digest there gets to.
func TestConvertReadsToTheEnd(t *testing.T) {
	testkit.RequireErofs(t)
	tarball := append(testimage.Tar(t, layerEntries()), make([]byte, 64<<10)...)
	r := &countingReader{r: bytes.NewReader(tarball)}
	if _, err := erofs.Convert(context.Background(), r, io.Discard); err != nil {
		t.Fatal(err)
	}
	if r.n != int64(len(tarball)) {
		t.Errorf("read %d of the stream's %d bytes", r.n, len(tarball))
	}
}

type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// TestCheckSaysWhatToInstall: without mkfs.erofs, the error names the
// package and the script that installs it.
func TestCheckSaysWhatToInstall(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	err := erofs.Check(context.Background())
	if !errors.Is(err, erofs.ErrNoMkfs) || !strings.Contains(err.Error(), "apt install erofs-utils") {
		t.Fatalf("Check without mkfs.erofs = %v", err)
	}
	if _, err := erofs.Convert(context.Background(), strings.NewReader(""), io.Discard); !errors.Is(err, erofs.ErrNoMkfs) {
		t.Fatalf("Convert without mkfs.erofs = %v", err)
	}
}

func TestParseCompression(t *testing.T) {
	for _, c := range erofs.Compressions {
		if got, err := erofs.ParseCompression(string(c)); err != nil || got != c {
			t.Errorf("ParseCompression(%q) = %q, %v", c, got, err)
		}
	}
	if _, err := erofs.ParseCompression("gzip"); err == nil || !strings.Contains(err.Error(), "lz4hc") {
		t.Errorf("ParseCompression(gzip) = %v, want the list of names", err)
	}
}
