package erofs_test

import (
	"archive/tar"
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kiln-build/kiln/internal/testimage"
	"github.com/kiln-build/kiln/internal/testkit"
	"github.com/kiln-build/kiln/layers/erofs"
)

// tarOf is a tar of entries, without its end marker when open.
func tarOf(t *testing.T, open bool, entries ...testimage.Entry) []byte {
	t.Helper()
	b := testimage.Tar(t, entries)
	if open {
		b = b[:len(b)-1024]
	}
	return b
}

// loneZeroBlock is issue 34's smuggled layer: GNU tar, Python and Go stop
// (or fail) at a single zero block, mkfs.erofs reads on past it, so the
// layer scanners see as one harmless file hid a backdoor.
func loneZeroBlock(t *testing.T) []byte {
	b := tarOf(t, true, testimage.File("etc/visible", []byte("harmless\n")))
	b = append(b, make([]byte, 512)...)
	return append(b, tarOf(t, false,
		testimage.File("usr/bin/hidden-backdoor", []byte("#!/bin/sh\nevil\n")),
		testimage.File("etc/visible", []byte("changed\n")))...)
}

// convertErr converts tarball and wants an error mentioning each of want.
func convertErr(t *testing.T, tarball []byte, want ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := erofs.Convert(ctx, bytes.NewReader(tarball), io.Discard, erofs.WithTempDir(t.TempDir()))
	if err == nil {
		t.Fatal("converted")
	}
	t.Logf("error: %v", err)
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Fatalf("err = %v, want it to mention %q", err, w)
		}
	}
}

// TestConvertRefusesLoneZeroBlock: what kiln's tar reader does not accept
// never reaches mkfs.erofs; the conversion fails in words.
func TestConvertRefusesLoneZeroBlock(t *testing.T) {
	testkit.RequireErofs(t)
	convertErr(t, loneZeroBlock(t), `after "etc/visible"`, "invalid tar header", "not a tar kiln can read")
}

// TestConvertRefusesDataAfterTheEnd: the end marker ends the layer; bytes
// other than zeros after it are refused, not passed on.
func TestConvertRefusesDataAfterTheEnd(t *testing.T) {
	testkit.RequireErofs(t)
	b := tarOf(t, false, testimage.File("etc/visible", []byte("harmless\n")))
	b = append(b, tarOf(t, false, testimage.File("usr/bin/hidden-backdoor", []byte("evil")))...)
	convertErr(t, b, "after the tar's end marker")
}

// TestConvertAppliesTheEntryRule: the EROFS form refuses what slim
// refuses (layers.CheckEntry), before mkfs.erofs sees it.
func TestConvertAppliesTheEntryRule(t *testing.T) {
	testkit.RequireErofs(t)
	for _, tc := range []struct {
		e    testimage.Entry
		want string
	}{
		{testimage.File("../etc/passwd", []byte("x")), "leaves the image root"},
		{testimage.Entry{Name: "label", Type: 'V'}, "tar type 'V'"},
		{testimage.Entry{Name: "cont", Type: tar.TypeCont}, "tar type '7'"},
		{testimage.Entry{Name: "x", Body: []byte("x"), Xattrs: map[string]string{"user." + strings.Repeat("a", 295): "v"}}, "over Linux's limit of 255"},
	} {
		convertErr(t, testimage.Tar(t, []testimage.Entry{tc.e}), tc.e.Name, tc.want)
	}
}

// TestConvertRefusesDataOnDevices: a device that declares data hides the
// entries Go's reader sees after it from mkfs.erofs, which skips that
// data: the EROFS form would lack what the tar form holds (a whiteout,
// say). The entry rule refuses it.
func TestConvertRefusesDataOnDevices(t *testing.T) {
	testkit.RequireErofs(t)
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	tw.WriteHeader(&tar.Header{Name: "dev/hide", Typeflag: tar.TypeChar, Mode: 0o644, Size: 1024, Format: tar.FormatUSTAR})
	tw.WriteHeader(&tar.Header{Name: "etc/.wh.shadow", Typeflag: tar.TypeReg, Mode: 0o644, Size: 1, Format: tar.FormatUSTAR})
	tw.Write([]byte("x"))
	tw.WriteHeader(&tar.Header{Name: "etc/visible", Typeflag: tar.TypeReg, Mode: 0o644, Size: 2, Format: tar.FormatUSTAR})
	tw.Write([]byte("ok"))
	tw.Close()
	convertErr(t, b.Bytes(), `"dev/hide" (tar type '3') declares 1024 bytes of data`)
}

// truncated is issue 34's hang: an entry that declares 1 TiB, in a stream
// that ends 10 kB later.
func truncated(t *testing.T) []byte {
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	if err := tw.WriteHeader(&tar.Header{Name: "huge", Typeflag: tar.TypeReg, Mode: 0o644, Size: 1 << 40}); err != nil {
		t.Fatal(err)
	}
	tw.Write(make([]byte, 10<<10))
	return b.Bytes()
}

// TestConvertTruncatedFails: a truncated tar fails the conversion at
// once (kiln's reader sees the stream end inside an entry), and
// mkfs.erofs does not outlive it.
func TestConvertTruncatedFails(t *testing.T) {
	testkit.RequireErofs(t)
	start := time.Now()
	convertErr(t, truncated(t), `"huge"`, "unexpected EOF")
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("took %v", d)
	}
}

// TestConvertBoundsDeclaredSizes: with the most the tar can hold known
// (WithMaxSize), an entry declaring more is refused before mkfs.erofs
// sees its header.
func TestConvertBoundsDeclaredSizes(t *testing.T) {
	testkit.RequireErofs(t)
	b := truncated(t)
	_, err := erofs.Convert(context.Background(), bytes.NewReader(b), io.Discard, erofs.WithMaxSize(int64(len(b))), erofs.WithTempDir(t.TempDir()))
	if err == nil || !strings.Contains(err.Error(), `"huge" declares 1099511627776 bytes`) {
		t.Fatalf("err = %v", err)
	}
}

// TestFsckRefusesABrokenImage: Fsck says in words that an image is not
// one the kernel should mount.
func TestFsckRefusesABrokenImage(t *testing.T) {
	testkit.RequireErofs(t)
	img := convert(t, testimage.Tar(t, layerEntries()))
	path := filepath.Join(t.TempDir(), "layer.erofs")
	if err := os.WriteFile(path, img, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := erofs.Fsck(context.Background(), path); err != nil {
		t.Fatalf("a good image: %v", err)
	}
	for i := 1024; i < 1024+128; i++ { // the superblock
		img[i] ^= 0x5a
	}
	if err := os.WriteFile(path, img, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := erofs.Fsck(context.Background(), path); err == nil || !strings.Contains(err.Error(), "fsck.erofs") {
		t.Fatalf("a broken image: err = %v", err)
	}
}
