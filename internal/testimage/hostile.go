package testimage

import (
	"archive/tar"
	"bytes"
	"encoding/binary"
	"fmt"
	"strings"
	"testing"
)

// The hostile layers of issue 34, as tar bytes: the regression tests and
// the fuzz seeds of every reader of layers share them.

// SparseTar is a tar of one old-GNU sparse file ('S') named name that
// declares size bytes and stores none: a few hundred bytes that expand
// to size zeros in a reader that honours the sparse map (N7).
func SparseTar(name string, size int64) []byte {
	blk := header(name, tar.TypeGNUSparse, 0, "ustar  \x00") // the GNU magic
	// realsize, base-256: too large for 11 octal digits.
	blk[483] = 0x80
	binary.BigEndian.PutUint64(blk[487:495], uint64(size))
	checksum(blk)
	return append(blk, make([]byte, 1024)...)
}

// SparsePAXTar is the same in the PAX format (GNU.sparse 1.0 records, a
// regular entry whose data starts with the sparse map), which readers
// that refuse type 'S' (containerd's) expand.
func SparsePAXTar(name string, size int64) []byte {
	var recs []byte
	for _, kv := range [][2]string{{"GNU.sparse.major", "1"}, {"GNU.sparse.minor", "0"}, {"GNU.sparse.name", name}, {"GNU.sparse.realsize", fmt.Sprint(size)}} {
		rec := " " + kv[0] + "=" + kv[1] + "\n"
		n := len(rec) + 1
		for len(fmt.Sprint(n))+len(rec) != n {
			n++
		}
		recs = append(recs, fmt.Sprint(n)+rec...)
	}
	b := header("PaxHeaders/"+name, tar.TypeXHeader, int64(len(recs)), "ustar\x0000")
	b = append(b, pad(recs)...)
	b = append(b, header("GNUSparseFile.0/"+name, tar.TypeReg, 512, "ustar\x0000")...)
	b = append(b, pad([]byte(fmt.Sprintf("1\n%d\n0\n", size)))...) // one empty extent at the end
	return append(b, make([]byte, 1024)...)
}

// header is a checksummed tar header block.
func header(name string, typ byte, size int64, magic string) []byte {
	blk := make([]byte, 512)
	copy(blk[0:100], name)
	copy(blk[100:108], "0000644\x00")
	copy(blk[108:116], "0000000\x00")
	copy(blk[116:124], "0000000\x00")
	copy(blk[124:136], fmt.Sprintf("%011o\x00", size))
	copy(blk[136:148], "14573570400\x00")
	blk[156] = typ
	copy(blk[257:265], magic)
	checksum(blk)
	return blk
}

func checksum(blk []byte) {
	copy(blk[148:156], "        ")
	var sum int
	for _, c := range blk {
		sum += int(c)
	}
	copy(blk[148:156], fmt.Sprintf("%06o\x00 ", sum))
}

func pad(b []byte) []byte {
	return append(b, make([]byte, (512-len(b)%512)%512)...)
}

// TruncatedTar declares a 1 TiB file and ends 10 KiB into it (N3).
func TruncatedTar(t testing.TB) []byte {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	if err := tw.WriteHeader(&tar.Header{Name: "huge", Typeflag: tar.TypeReg, Mode: 0o644, Size: 1 << 40}); err != nil {
		t.Fatal(err)
	}
	tw.Write(make([]byte, 10<<10))
	tw.Flush()
	return b.Bytes()
}

// LoneZeroBlockTar is one harmless file, a single zero block, and then
// entries that readers reading past a lone zero block see (N2).
func LoneZeroBlockTar(t testing.TB) []byte {
	t.Helper()
	b := Tar(t, []Entry{File("etc/visible", []byte("harmless\n"))})
	b = b[:len(b)-1024]
	b = append(b, make([]byte, 512)...)
	return append(b, Tar(t, []Entry{
		File("usr/bin/hidden-backdoor", []byte("#!/bin/sh\nevil\n")),
		File("etc/visible", []byte("changed\n")),
	})...)
}

// HostileTars are issue 34's hostile layers by name: each must be
// refused by kiln's entry rule or its tar reader.
func HostileTars(t testing.TB) map[string][]byte {
	t.Helper()
	one := func(e Entry) []byte { return Tar(t, []Entry{e}) }
	return map[string][]byte{
		"lone-zero-block": LoneZeroBlockTar(t),
		"truncated-1tib":  TruncatedTar(t),
		"sparse-64gib":    SparseTar("sparse", 64<<30),
		"sparse-pax-2gib": SparsePAXTar("sparse", 2<<30),
		"xattr-300":       one(Entry{Name: "x", Body: []byte("x"), Xattrs: map[string]string{"user." + strings.Repeat("a", 295): "v"}}),
		"type-v":          one(Entry{Name: "label", Type: 'V'}),
		"type-7":          one(Entry{Name: "cont", Type: tar.TypeCont}),
		"traversal":       one(File("../etc/passwd", []byte("root::0:0::/:/bin/sh\n"))),
		"symlink-out":     one(Symlink("a/evil", "../../etc")),
	}
}
