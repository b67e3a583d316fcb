package slim

import (
	"bytes"
	"crypto/sha256"
	"debug/elf"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// wantELF reads the same facts with debug/elf from the whole file (random
// access, section headers): the reference the stream reader must match.
func wantELF(t *testing.T, file string) (*elfInfo, bool) {
	f, err := elf.Open(file)
	if err != nil {
		return nil, false
	}
	defer f.Close()
	w := &elfInfo{}
	for _, p := range f.Progs {
		switch p.Type {
		case elf.PT_INTERP:
			b, _ := io.ReadAll(p.Open())
			w.interp = cstring(b)
		case elf.PT_DYNAMIC:
			w.dynamic = true
		}
	}
	if f.SectionByType(elf.SHT_DYNAMIC) == nil {
		return w, w.dynamic
	}
	w.needed, _ = f.ImportedLibraries()
	if s, _ := f.DynString(elf.DT_SONAME); len(s) > 0 {
		w.soname = s[0]
	}
	for _, s := range must(f.DynString(elf.DT_RUNPATH)) {
		w.runpath = append(w.runpath, splitPath(s)...)
	}
	for _, s := range must(f.DynString(elf.DT_RPATH)) {
		w.rpath = append(w.rpath, splitPath(s)...)
	}
	return w, true
}

func must(s []string, _ error) []string { return s }

func sameELF(a, b *elfInfo) bool {
	return a.interp == b.interp && a.soname == b.soname && slices.Equal(a.needed, b.needed) &&
		slices.Equal(a.runpath, b.runpath) && slices.Equal(a.rpath, b.rpath) && a.err == "" && b.err == ""
}

// streamELF reads file through readELF with a head of headLen bytes (small
// heads force the spill and read-ahead paths), teeing into a hash that must
// match the file's.
func streamELF(t *testing.T, file string, headLen int) *elfInfo {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	peek := b[:min(len(b), 64)]
	hs := sha256.New()
	tmp := t.TempDir()
	info, err := readELF(peek, bytes.NewReader(b[len(peek):]), hs, make([]byte, max(headLen, len(peek))), tmp)
	if err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	if got, want := hs.Sum(nil), sha256.Sum256(b); !bytes.Equal(got, want[:]) {
		t.Fatalf("%s: tee saw different bytes", file)
	}
	if left, _ := os.ReadDir(tmp); len(left) > 0 {
		t.Fatalf("%s: spill files left: %v", file, left)
	}
	return info
}

// The stream reader agrees with debug/elf on every ELF file of this
// machine's library and program directories (real objects from many
// linkers and layouts), whatever the head size.
func TestReadELFMatchesDebugELF(t *testing.T) {
	var files []string
	for _, g := range []string{"/usr/lib/x86_64-linux-gnu/*.so*", "/usr/bin/*", "/usr/lib/x86_64-linux-gnu/*/*.so*", "/usr/lib/gcc/x86_64-linux-gnu/*/cc1*"} {
		m, _ := filepath.Glob(g)
		files = append(files, m...)
	}
	checked, spilled := 0, 0
	for _, f := range files {
		if fi, err := os.Lstat(f); err != nil || !fi.Mode().IsRegular() || fi.Size() > 256<<20 {
			continue
		}
		want, ok := wantELF(t, f)
		if !ok && want == nil {
			continue // not ELF
		}
		for _, hl := range []int{elfHeadLen, 4096, 1024} {
			got := streamELF(t, f, hl)
			if !sameELF(got, want) {
				t.Errorf("%s (head %d):\n got %+v\nwant %+v", f, hl, got, want)
			}
		}
		checked++
		if fi, _ := os.Stat(f); fi.Size() > elfHeadLen {
			spilled++
		}
		if testing.Short() && checked > 50 {
			break
		}
	}
	if checked < 20 {
		t.Fatalf("only %d ELF files found on this machine", checked)
	}
	t.Logf("%d ELF files agree with debug/elf (%d larger than the head)", checked, spilled)
}

// Malformed ELF files are reported, not fatal; a truncated one too.
func TestReadELFMalformed(t *testing.T) {
	good, err := os.ReadFile("/usr/bin/true")
	if err != nil {
		t.Skip(err)
	}
	cases := map[string][]byte{
		"short":        []byte("\x7fELF\x02\x01"),
		"bad class":    append([]byte("\x7fELF\x09\x01\x01"), make([]byte, 100)...),
		"truncated":    good[:len(good)/3*2],
		"phoff beyond": func() []byte { b := bytes.Clone(good[:200]); b[0x20] = 0xff; b[0x21] = 0xff; b[0x22] = 0xff; return b }(),
	}
	for name, b := range cases {
		info, err := readELF(b[:min(64, len(b))], bytes.NewReader(b[min(64, len(b)):]), nil, make([]byte, elfHeadLen), t.TempDir())
		if err != nil {
			t.Errorf("%s: stream error %v", name, err)
			continue
		}
		if name == "truncated" && info.err == "" && len(info.needed) > 0 {
			continue // the dynamic section may sit in the first two thirds
		}
		if info.err == "" {
			t.Errorf("%s: no error reported: %+v", name, info)
		} else if !strings.Contains(info.err, " ") {
			t.Errorf("%s: terse error %q", name, info.err)
		}
	}
}
