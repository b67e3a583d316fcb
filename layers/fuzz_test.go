package layers_test

import (
	"archive/tar"
	"bytes"
	"context"
	"io"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kiln-build/kiln/internal/testimage"
	"github.com/kiln-build/kiln/layers"
)

// FuzzWalkTar feeds arbitrary bytes (seeded with real, truncated and
// compressed layers) through decompression and the tar walker: any input
// must end in entries or an error, never a panic or a hang.
func FuzzWalkTar(f *testing.F) {
	tb := testimage.Tar(f, []testimage.Entry{
		testimage.Sized("usr/bin/nvcc", 3000), testimage.Whiteout("a/b"), testimage.Opaque("c"),
		testimage.Symlink("x", "../../y"), testimage.Sized("../evil", 10),
	})
	f.Add(tb)
	f.Add(tb[:700])
	f.Add(gz(tb))
	f.Add(zst(tb))
	f.Add(gz(tb)[:40])
	for _, b := range testimage.HostileTars(f) {
		f.Add(b)
		f.Add(zst(b))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		r, _, closeDec, err := layers.Decompress(bytes.NewReader(b))
		if err != nil {
			return
		}
		defer closeDec()
		_ = layers.WalkTar(context.Background(), r, func(e *layers.Entry, body io.Reader) error {
			if e.Escapes && e.Path != "" && e.Path[0] == '/' {
				t.Fatalf("escaping entry kept a leading slash: %q", e.Path)
			}
			_, err := io.CopyN(io.Discard, body, 1<<20)
			if err == io.EOF {
				err = nil
			}
			return err
		})
	})
}

// TestCheckEntrySeeds: FuzzCheckEntry's seed corpus holds issue 34's
// hostile layers (testimage.HostileTars), so that `go test` runs them.
func TestCheckEntrySeeds(t *testing.T) {
	seeds := map[string][]byte{}
	for name, b := range testimage.HostileTars(t) {
		seeds["issue34-"+name] = b
	}
	testimage.CheckFuzzSeeds(t, "FuzzCheckEntry", seeds)
}

// FuzzCheckEntry runs kiln's tar reader and its one entry rule over
// arbitrary tars (seeded, in testdata/fuzz, with issue 34's hostile
// layers): never a panic or a hang; every refusal names its entry in
// words; every entry the rule lets through is one every tar reader reads
// alike (inside the root, a known type, data only on files, no sparse
// map, xattrs Linux can hold), and its body yields exactly the size it
// declares.
func FuzzCheckEntry(f *testing.F) {
	f.Add(testimage.Tar(f, []testimage.Entry{testimage.Dir("usr/"), testimage.Sized("usr/a", 700), testimage.Symlink("usr/l", "a"), {Name: "usr/h", Type: tar.TypeLink, Linkname: "usr/a"}, testimage.Whiteout("etc/x"), testimage.Opaque("opt")}))
	f.Fuzz(func(t *testing.T, b []byte) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = layers.WalkTar(ctx, bytes.NewReader(b), func(e *layers.Entry, body io.Reader) error {
			h := e.Header
			if err := layers.CheckEntry(e); err != nil {
				if !strings.Contains(err.Error(), strconv.Quote(h.Name)) || !strings.Contains(err.Error(), "refusing") {
					t.Fatalf("refusal of %q is not in words naming it: %v", h.Name, err)
				}
				return err
			}
			checkAccepted(t, e)
			n, err := io.Copy(io.Discard, io.LimitReader(body, 1<<20))
			if err == nil && n < min(h.Size, 1<<20) {
				t.Fatalf("entry %q declares %d bytes; its body gave %d and no error", h.Name, h.Size, n)
			}
			return err
		})
	})
}

// checkAccepted fails t when an entry CheckEntry let through is one tar
// readers disagree on.
func checkAccepted(t *testing.T, e *layers.Entry) {
	h := e.Header
	switch {
	case e.Escapes:
		t.Fatalf("accepted %q, which leaves the root", h.Name)
	case h.Typeflag != tar.TypeReg && h.Size != 0:
		t.Fatalf("accepted %q of type %q with %d bytes of data", h.Name, h.Typeflag, h.Size)
	case !strings.ContainsRune(string([]byte{tar.TypeReg, tar.TypeLink, tar.TypeSymlink, tar.TypeChar, tar.TypeBlock, tar.TypeDir, tar.TypeFifo}), rune(h.Typeflag)):
		t.Fatalf("accepted %q of type %q", h.Name, h.Typeflag)
	}
	for k, v := range h.PAXRecords {
		if strings.HasPrefix(k, "GNU.sparse.") {
			t.Fatalf("accepted %q with sparse record %s", h.Name, k)
		}
		if name, ok := strings.CutPrefix(k, "SCHILY.xattr."); ok && (len(name) > 255 || len(v) > 64<<10) {
			t.Fatalf("accepted %q with an xattr of %d/%d bytes", h.Name, len(name), len(v))
		}
	}
}
