package main

import (
	"archive/tar"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"sort"
	"syscall"
	"testing"
	"time"
)

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func setOpaque(dir string) bool {
	for _, attr := range []string{"trusted.overlay.opaque", "user.overlay.opaque"} {
		if syscall.Setxattr(dir, attr, []byte("y"), 0) == nil {
			return true
		}
	}
	return false
}

// makeTree builds a tiny overlayfs-style upper dir (and a lower dir) and
// reports which overlay features the file system let us create.
func makeTree(t *testing.T) (upper, lower string, whiteout, opaque, chown bool) {
	root := t.TempDir()
	upper, lower = filepath.Join(root, "upper"), filepath.Join(root, "lower")
	must(t, os.MkdirAll(filepath.Join(lower, "opq", "old"), 0o755))
	must(t, os.MkdirAll(filepath.Join(upper, "sub"), 0o750))
	must(t, os.MkdirAll(filepath.Join(upper, "opq"), 0o755))
	must(t, os.MkdirAll(filepath.Join(upper, "newdir"), 0o755))
	must(t, os.WriteFile(filepath.Join(upper, "a.txt"), []byte("hello\n"), 0o644))
	must(t, os.WriteFile(filepath.Join(upper, "sub", "b.bin"), bytes.Repeat([]byte{7}, 3000), 0o755))
	must(t, os.Link(filepath.Join(upper, "sub", "b.bin"), filepath.Join(upper, "sub", "c.bin")))
	must(t, os.Symlink("../a.txt", filepath.Join(upper, "sub", "link")))
	must(t, os.WriteFile(filepath.Join(upper, "opq", "fresh"), []byte("x"), 0o600))
	whiteout = syscall.Mknod(filepath.Join(upper, "sub", "gone"), syscall.S_IFCHR, 0) == nil
	// a real device node must be skipped
	_ = syscall.Mknod(filepath.Join(upper, "null"), syscall.S_IFCHR|0o666, int((1<<8)|3))
	opaque = setOpaque(filepath.Join(upper, "opq")) && setOpaque(filepath.Join(upper, "newdir"))
	chown = os.Lchown(filepath.Join(upper, "a.txt"), 1234, 5678) == nil
	return
}

type tarEnt struct {
	hdr  *tar.Header
	data []byte
}

func readTar(t *testing.T, b []byte) []tarEnt {
	t.Helper()
	var out []tarEnt
	tr := tar.NewReader(bytes.NewReader(b))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		must(t, err)
		d, err := io.ReadAll(tr)
		must(t, err)
		out = append(out, tarEnt{h, d})
	}
}

func TestWriteTarDeterministicAndWhiteouts(t *testing.T) {
	upper, lower, whiteout, opaque, chown := makeTree(t)
	epoch := time.Unix(1747699200, 0)
	var stats []Entry
	write := func() []byte {
		var buf bytes.Buffer
		stats = nil
		must(t, WriteTar(&buf, upper, TarOptions{ModTime: epoch, LowerDirs: []string{lower},
			OnEntry: func(e Entry) { stats = append(stats, e) }}))
		return buf.Bytes()
	}
	first := write()
	// Touch everything: mtimes must not leak into the output.
	later := time.Now().Add(time.Hour)
	must(t, filepath.Walk(upper, func(p string, fi os.FileInfo, err error) error {
		if err != nil || fi.Mode()&os.ModeSymlink != 0 || fi.Mode()&os.ModeDevice != 0 {
			return err
		}
		return os.Chtimes(p, later, later)
	}))
	second := write()
	if !bytes.Equal(first, second) {
		t.Fatal("tar output is not deterministic")
	}

	ents := readTar(t, first)
	var names []string
	byName := map[string]*tar.Header{}
	for _, e := range ents {
		names = append(names, e.hdr.Name)
		byName[e.hdr.Name] = e.hdr
		if !e.hdr.ModTime.Equal(epoch) {
			t.Errorf("%s: mtime %v, want %v", e.hdr.Name, e.hdr.ModTime, epoch)
		}
		if e.hdr.Uname != "" || e.hdr.Gname != "" {
			t.Errorf("%s: uname/gname set", e.hdr.Name)
		}
	}
	want := []string{"a.txt", "newdir/", "opq/"}
	if opaque {
		want = append(want, "opq/.wh..wh..opq")
	}
	want = append(want, "opq/fresh", "sub/", "sub/b.bin", "sub/c.bin")
	if whiteout {
		want = append(want, "sub/.wh.gone")
	}
	want = append(want, "sub/link")
	if !sort.StringsAreSorted(want[:3]) || len(names) != len(want) {
		t.Fatalf("entries %q, want %q", names, want)
	}
	for i := range want {
		if names[i] != want[i] {
			t.Fatalf("entries %q, want %q", names, want)
		}
	}
	if h := byName["sub/c.bin"]; h.Typeflag != tar.TypeLink || h.Linkname != "sub/b.bin" || h.Size != 0 {
		t.Errorf("hardlink: %+v", h)
	}
	if h := byName["sub/b.bin"]; h.Typeflag != tar.TypeReg || h.Size != 3000 || h.Mode != 0o755 {
		t.Errorf("regular file: %+v", h)
	}
	if h := byName["sub/link"]; h.Typeflag != tar.TypeSymlink || h.Linkname != "../a.txt" {
		t.Errorf("symlink: %+v", h)
	}
	if h := byName["sub/"]; h.Typeflag != tar.TypeDir || h.Mode != 0o750 {
		t.Errorf("dir: %+v", h)
	}
	if chown {
		if h := byName["a.txt"]; h.Uid != 1234 || h.Gid != 5678 {
			t.Errorf("uid/gid not preserved: %d/%d", h.Uid, h.Gid)
		}
	}
	if whiteout {
		if h := byName["sub/.wh.gone"]; h.Typeflag != tar.TypeReg || h.Size != 0 {
			t.Errorf("whiteout: %+v", h)
		}
	} else {
		t.Log("mknod not permitted: whiteout conversion not exercised")
	}
	if !opaque {
		t.Log("overlay xattrs not settable: opaque conversion not exercised")
	}

	// The callback sees the same entries, with deletions decoded.
	var s LayerStats
	for _, e := range stats {
		s.Add(e)
	}
	if s.RegularBytes != 6+3000+1 || s.Hardlinks != 1 || s.Symlinks != 1 {
		t.Errorf("stats: %+v", s)
	}
	if whiteout && (len(s.Whiteouts) != 1 || s.Whiteouts[0] != "sub/gone") {
		t.Errorf("whiteouts: %q", s.Whiteouts)
	}
	if opaque && (len(s.OpaqueDirs) != 1 || s.OpaqueDirs[0] != "opq") {
		t.Errorf("opaque dirs: %q", s.OpaqueDirs)
	}
	if whiteout && (!s.deletedBy("sub/gone") || !s.deletedBy("sub/gone/x") || s.deletedBy("sub/gonex")) {
		t.Error("deletedBy whiteout logic")
	}
}

func TestSafetensorsValid(t *testing.T) {
	p := filepath.Join(t.TempDir(), "m.safetensors")
	size, err := WriteSafetensors(p, 3)
	must(t, err)
	b, err := os.ReadFile(p)
	must(t, err)
	if int64(len(b)) != size {
		t.Fatalf("size %d, reported %d", len(b), size)
	}
	n := binary.LittleEndian.Uint64(b[:8])
	var hdr map[string]json.RawMessage
	must(t, json.Unmarshal(b[8:8+n], &hdr))
	type spec struct {
		Dtype       string
		Shape       []int64
		DataOffsets [2]int64 `json:"data_offsets"`
	}
	var specs []spec
	for k, v := range hdr {
		if k == "__metadata__" {
			continue
		}
		var s spec
		must(t, json.Unmarshal(v, &s))
		specs = append(specs, s)
	}
	sort.Slice(specs, func(i, j int) bool { return specs[i].DataOffsets[0] < specs[j].DataOffsets[0] })
	var off int64
	for _, s := range specs {
		elems := int64(1)
		for _, d := range s.Shape {
			elems *= d
		}
		if s.Dtype != "F16" || s.DataOffsets[0] != off || s.DataOffsets[1]-s.DataOffsets[0] != 2*elems {
			t.Fatalf("bad tensor %+v at %d", s, off)
		}
		off = s.DataOffsets[1]
	}
	if 8+int64(n)+off != size || off != 3<<20 {
		t.Fatalf("data %d bytes, file %d", off, size)
	}
	// deterministic
	p2 := filepath.Join(t.TempDir(), "m2.safetensors")
	_, err = WriteSafetensors(p2, 3)
	must(t, err)
	b2, _ := os.ReadFile(p2)
	if !bytes.Equal(b, b2) {
		t.Fatal("weights not deterministic")
	}
}
