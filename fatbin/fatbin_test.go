package fatbin

import (
	"bytes"
	"encoding/binary"
	"reflect"
	"strings"
	"testing"
	"testing/iotest"
)

// ent is an entry to synthesise: kind, arch, flags and payload length.
type ent struct {
	kind  Kind
	arch  int
	flags uint64
	n     int
}

func cubin(arch, n int) ent  { return ent{KindCubin, arch, flag64Bit | flagLinux | flagCompressed, n} }
func cubinA(arch, n int) ent { return ent{KindCubin, arch, flag64Bit | flagLinux | flagCompressed | flagArchSpecific, n} }
func ptx(arch, n int) ent    { return ent{KindPTX, arch, flag64Bit | flagLinux | flagCompressed, n} }

// container builds a fat binary as nvcc lays it out; payload bytes are
// derived from the container, entry and position so moves are visible.
func container(id int, es ...ent) []byte {
	le := binary.LittleEndian
	var body bytes.Buffer
	for j, e := range es {
		h := make([]byte, 72)
		le.PutUint16(h[0:], uint16(e.kind))
		le.PutUint16(h[2:], 0x0101)
		le.PutUint32(h[4:], 72)
		le.PutUint64(h[8:], uint64(e.n))
		le.PutUint32(h[16:], uint32(e.n))
		le.PutUint32(h[28:], uint32(e.arch))
		le.PutUint64(h[40:], e.flags)
		body.Write(h)
		for k := 0; k < e.n; k++ {
			body.WriteByte(byte(1 + (id*31+j*7+k)%250))
		}
	}
	hdr := make([]byte, 16)
	copy(hdr, magic)
	le.PutUint16(hdr[4:], 1)
	le.PutUint16(hdr[6:], 16)
	le.PutUint64(hdr[8:], uint64(body.Len()))
	return append(hdr, body.Bytes()...)
}

// elfWith builds a little-endian ELF64 file: a header, some text, the
// given containers in .nv_fatbin, more data (with a magic look-alike in
// it), .shstrtab and the section header table at the end, as ld lays
// them out.
func elfWith(containers ...[]byte) []byte {
	le := binary.LittleEndian
	f := make([]byte, 64)
	copy(f, "\x7fELF")
	f[4], f[5], f[6] = 2, 1, 1
	f = append(f, bytes.Repeat([]byte{0x90}, 200)...)
	fatOff := len(f)
	for _, c := range containers {
		f = append(f, c...)
	}
	fatSize := len(f) - fatOff
	// data after the section: a magic that is not a fat binary
	f = append(f, magic...)
	f = append(f, 7, 7, 7, 7, 1, 2, 3, 4)
	strOff := len(f)
	names := "\x00.text\x00.nv_fatbin\x00.shstrtab\x00"
	f = append(f, names...)
	for len(f)%8 != 0 {
		f = append(f, 0)
	}
	shoff := len(f)
	sec := func(name, typ uint32, flags uint64, off, size int) {
		s := make([]byte, 64)
		le.PutUint32(s[0:], name)
		le.PutUint32(s[4:], typ)
		le.PutUint64(s[8:], flags)
		le.PutUint64(s[24:], uint64(off))
		le.PutUint64(s[32:], uint64(size))
		f = append(f, s...)
	}
	sec(0, 0, 0, 0, 0)
	sec(1, 1, 6, 64, 200)
	sec(7, 1, 2, fatOff, fatSize)
	sec(18, 3, 0, strOff, len(names))
	le.PutUint64(f[0x28:], uint64(shoff))
	le.PutUint16(f[0x3a:], 64)
	le.PutUint16(f[0x3c:], 4)
	le.PutUint16(f[0x3e:], 3)
	return f
}

func torchLike() []byte {
	return elfWith(
		container(1, cubin(50, 40), cubin(60, 41), cubin(70, 42), cubin(75, 43), cubin(80, 44), cubin(86, 45), ptx(90, 60), cubin(90, 46)),
		container(2, cubin(50, 10), cubin(80, 11), cubin(86, 12), cubinA(90, 13), cubin(90, 14), ptx(90, 20)),
	)
}

func scan(t *testing.T, b []byte) *File {
	t.Helper()
	// one byte at a time: the windows and the scan must not depend on
	// how the stream is chunked
	f, err := Scan(iotest.OneByteReader(bytes.NewReader(b)))
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func TestScan(t *testing.T) {
	b := torchLike()
	f := scan(t, b)
	if f.Size != int64(len(b)) || len(f.Containers) != 2 {
		t.Fatalf("size %d containers %d", f.Size, len(f.Containers))
	}
	if f.FatbinSection == nil {
		t.Fatalf("no section: %s", f.SectionErr)
	}
	for _, c := range f.Containers {
		if !c.Complete || !f.Editable(&c) {
			t.Errorf("container at %d not editable", c.Off)
		}
	}
	want := []string{"sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90", "sm_90a", "compute_90"}
	if got := f.Archs(); !reflect.DeepEqual(got, want) {
		t.Errorf("archs %v, want %v", got, want)
	}
}

func TestScanNotELF(t *testing.T) {
	b := append([]byte("not an elf, but a fat binary: "), container(1, cubin(80, 5))...)
	f := scan(t, b)
	if len(f.Containers) != 1 || f.FatbinSection != nil || !strings.Contains(f.SectionErr, "not an ELF") {
		t.Fatalf("%+v", f)
	}
	p := PlanFile(f, []GPU{{"h100", 90}}, true)
	if len(p.Edits) != 0 || p.Whole == "" {
		t.Fatalf("a fat binary outside .nv_fatbin was planned: %+v", p)
	}
}

func names(c *Container, keep []bool) []string {
	var out []string
	for i, e := range c.Entries {
		if keep[i] {
			out = append(out, e.Name())
		}
	}
	return out
}

func TestSelect(t *testing.T) {
	h100, l4, t4, a100, b200, v100 := GPU{"h100", 90}, GPU{"l4", 89}, GPU{"t4", 75}, GPU{"a100", 80}, GPU{"b200", 100}, GPU{"v100", 70}
	full := []ent{cubin(50, 1), cubin(70, 1), cubin(80, 1), cubin(86, 1), cubinA(90, 1), cubin(90, 1), ptx(80, 1), ptx(90, 1)}
	fa := []ent{cubin(80, 1), cubin(90, 1)}
	for _, tc := range []struct {
		name    string
		es      []ent
		fleet   []GPU
		keepPTX bool
		want    []string
		missing []string
	}{
		{"h100 keeps sm_90, sm_90a and the newest PTX", full, []GPU{h100}, true, []string{"sm_90a", "sm_90", "compute_90"}, nil},
		{"h100 without PTX", full, []GPU{h100}, false, []string{"sm_90a", "sm_90"}, nil},
		{"l4 runs sm_86 code", full, []GPU{l4}, false, []string{"sm_86"}, nil},
		{"l4 on sm_80/sm_90 runs sm_80", fa, []GPU{l4}, false, []string{"sm_80"}, nil},
		{"mixed fleet", full, []GPU{h100, l4, t4}, true, []string{"sm_70", "sm_86", "sm_90a", "sm_90", "compute_90"}, nil},
		{"nothing for a t4 in an sm_80/sm_90 container: kept whole", fa, []GPU{t4}, true, []string{"sm_80", "sm_90"}, []string{"t4"}},
		{"a t4 lacking code beside an h100 does not keep it whole", fa, []GPU{t4, h100}, true, []string{"sm_90"}, []string{"t4"}},
		{"a newer GPU than every cubin JITs the newest PTX at or below it", full, []GPU{b200}, false, []string{"compute_90"}, nil},
		{"v100 uses sm_70 even when sm_50 exists", full, []GPU{v100}, false, []string{"sm_70"}, nil},
		{"a100 with sm_86 present does not take sm_86", full, []GPU{a100}, false, []string{"sm_80"}, nil},
		{"unknown flags are kept", []ent{cubin(50, 1), {KindCubin, 60, 0x80000000, 1}, cubin(90, 1)}, []GPU{h100}, true, []string{"sm_60", "sm_90"}, nil},
		{"unknown kinds are kept", []ent{{7, 50, flag64Bit, 1}, cubin(90, 1)}, []GPU{h100}, true, []string{"kind7_50", "sm_90"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := scan(t, elfWith(container(1, tc.es...)))
			c := &f.Containers[0]
			keep, missing := Select(c, tc.fleet, tc.keepPTX)
			if got := names(c, keep); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("kept %v, want %v", got, tc.want)
			}
			if !reflect.DeepEqual(missing, tc.missing) {
				t.Errorf("missing %v, want %v", missing, tc.missing)
			}
		})
	}
}

func TestPrune(t *testing.T) {
	src := torchLike()
	f := scan(t, src)
	p := PlanFile(f, []GPU{{"h100", 90}}, true)
	if p.Whole != "" || p.Edited != 2 || len(p.Warnings) != 0 {
		t.Fatalf("plan %+v", p)
	}
	if want := []string{"sm_90", "sm_90a", "compute_90"}; !reflect.DeepEqual(p.Kept, want) {
		t.Errorf("kept %v, want %v", p.Kept, want)
	}
	if want := []string{"sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86"}; !reflect.DeepEqual(p.Dropped, want) {
		t.Errorf("dropped %v, want %v", p.Dropped, want)
	}
	var out bytes.Buffer
	n, err := Prune(&out, iotest.HalfReader(bytes.NewReader(src)), p)
	if err != nil {
		t.Fatal(err)
	}
	got := out.Bytes()
	if n != int64(len(src)) || len(got) != len(src) {
		t.Fatalf("wrote %d (%d) bytes of %d", n, len(got), len(src))
	}
	// Everything outside the containers is untouched.
	sec := f.FatbinSection
	if !bytes.Equal(got[:sec.Off], src[:sec.Off]) || !bytes.Equal(got[sec.Off+sec.Size:], src[sec.Off+sec.Size:]) {
		t.Error("bytes outside .nv_fatbin changed")
	}
	g := scan(t, got)
	if len(g.Containers) != 2 {
		t.Fatalf("%d containers after", len(g.Containers))
	}
	var zeroed int64
	for i, c := range g.Containers {
		orig := f.Containers[i]
		if c.Off != orig.Off || !c.Complete {
			t.Fatalf("container %d moved or broken: %+v", i, c)
		}
		// The kept entries, byte for byte, in their order.
		var want []byte
		for j, e := range orig.Entries {
			if p.Edits[i].Keep[j] {
				want = append(want, src[e.Off:e.Off+e.Len()]...)
			}
		}
		body := got[c.Off+c.Header : c.End()]
		if !bytes.Equal(body, want) {
			t.Errorf("container %d: kept entries differ", i)
		}
		free := got[c.End():orig.End()]
		if len(free) == 0 || bytes.Count(free, []byte{0}) != len(free) {
			t.Errorf("container %d: %d freed bytes, not all zero", i, len(free))
		}
		zeroed += int64(len(free))
	}
	if zeroed != p.Zeroed {
		t.Errorf("zeroed %d, plan says %d", zeroed, p.Zeroed)
	}
	if want := []string{"sm_90", "sm_90a", "compute_90"}; !reflect.DeepEqual(g.Archs(), want) {
		t.Errorf("after: %v", g.Archs())
	}
	// Pruning the pruned file for the same fleet changes nothing.
	if p2 := PlanFile(g, []GPU{{"h100", 90}}, true); len(p2.Edits) != 0 {
		t.Errorf("second prune edits %d containers", len(p2.Edits))
	}
}

func TestPruneRefusesAnotherFile(t *testing.T) {
	src := torchLike()
	p := PlanFile(scan(t, src), []GPU{{"h100", 90}}, true)
	other := elfWith(
		container(1, cubin(50, 40), cubin(60, 41), cubin(70, 42), cubin(75, 43), cubin(80, 44), cubin(86, 45), ptx(90, 61), cubin(90, 46)),
		container(2, cubin(50, 10), cubin(80, 11), cubin(86, 12), cubinA(90, 13), cubin(90, 14), ptx(90, 20)),
	)
	var out bytes.Buffer
	if _, err := Prune(&out, bytes.NewReader(other), p); err == nil || !strings.Contains(err.Error(), "not the one scanned") {
		t.Fatalf("err = %v", err)
	}
	if _, err := Prune(&out, bytes.NewReader(src[:len(src)/2]), p); err == nil {
		t.Fatal("a truncated file pruned without error")
	}
}

func TestPlanIdleContainerKeptWhole(t *testing.T) {
	f := scan(t, elfWith(
		container(1, cubin(50, 5), cubin(75, 5), cubin(80, 5), cubin(90, 5)),
		container(2, cubin(80, 5)), // an Ampere-only kernel, as cuBLAS has
	))
	p := PlanFile(f, []GPU{{"h100", 90}}, false)
	if p.Edited != 1 || len(p.Warnings) != 1 || !strings.Contains(p.Warnings[0], "1 of 2 fat binaries have code for none") || p.Missing["h100"] != 1 {
		t.Fatalf("%+v", p)
	}
	if want := []string{"sm_80", "sm_90"}; !reflect.DeepEqual(p.Kept, want) {
		t.Errorf("kept %v", p.Kept)
	}
	if want := []string{"sm_50", "sm_75"}; !reflect.DeepEqual(p.Dropped, want) {
		t.Errorf("dropped %v", p.Dropped)
	}
}
