package fatbin

import (
	"bytes"
	"os"
	"reflect"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/kiln-build/kiln/internal/testimage"
)

type ent = testimage.FatbinEntry

var (
	cubin     = testimage.Cubin
	cubinA    = testimage.CubinA
	ptx       = testimage.PTX
	container = testimage.FatbinContainer
	elfWith   = testimage.FatbinELF
)

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
	if !f.Registered() {
		t.Fatalf("no .nv_fatbin among %+v: %s", f.Sections, f.SectionErr)
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
	if len(f.Containers) != 1 || f.Sections != nil || !strings.Contains(f.SectionErr, "not an ELF") {
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
		{"nothing for a t4 in an sm_80/sm_90 container: its newest cubin stays", fa, []GPU{t4}, true, []string{"sm_90"}, []string{"t4"}},
		{"nothing for a t4, PTX newer than it kept by keepPTX", []ent{cubin(80, 1), cubin(86, 1), ptx(86, 1)}, []GPU{t4}, true, []string{"sm_86", "compute_86"}, []string{"t4"}},
		{"nothing for an h100 but sm_80a-like specific code: it stays", []ent{cubinA(80, 1)}, []GPU{h100}, false, []string{"sm_80a"}, []string{"h100"}},
		{"a t4 lacking code beside an h100 does not keep it whole", fa, []GPU{t4, h100}, true, []string{"sm_90"}, []string{"t4"}},
		{"a newer GPU than every cubin JITs the newest PTX at or below it", full, []GPU{b200}, false, []string{"compute_90"}, nil},
		{"v100 uses sm_70 even when sm_50 exists", full, []GPU{v100}, false, []string{"sm_70"}, nil},
		{"a100 with sm_86 present does not take sm_86", full, []GPU{a100}, false, []string{"sm_80"}, nil},
		{"unknown flags are kept", []ent{cubin(50, 1), {Kind: 2, Arch: 60, Flags: 0x80000000, N: 1}, cubin(90, 1)}, []GPU{h100}, true, []string{"sm_60", "sm_90"}, nil},
		{"unknown kinds are kept", []ent{{Kind: 7, Arch: 50, Flags: 1, N: 1}, cubin(90, 1)}, []GPU{h100}, true, []string{"kind7_50", "sm_90"}, nil},
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
	sec := section(t, f, ".nv_fatbin")
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

func section(t *testing.T, f *File, name string) Section {
	t.Helper()
	for _, s := range f.Sections {
		if s.Name == name {
			return s
		}
	}
	t.Fatalf("no %s among %+v", name, f.Sections)
	return Section{}
}

// An -rdc build (NCCL) registers its relocatable objects' containers in
// __nv_relfatbin beside the device-linked one in .nv_fatbin: both are
// pruned. Containers a library keeps in its own data (cuFFT's .data) are
// never edited, and the plan says where they are.
func TestPruneRelfatbinNotLibraryData(t *testing.T) {
	all := func(id int) []byte {
		return container(id, cubin(50, 20), cubin(70, 21), cubin(80, 22), ptx(90, 30), cubin(90, 23))
	}
	src := testimage.FatbinELFSections(
		testimage.FatbinSection{Name: "__nv_relfatbin", Containers: [][]byte{all(1), all(2)}},
		testimage.FatbinSection{Name: ".nv_fatbin", Containers: [][]byte{all(3)}},
		testimage.FatbinSection{Name: ".data", Containers: [][]byte{container(4, cubin(80, 9)), container(5, ptx(70, 9), cubin(90, 9), cubin(50, 9))}},
	)
	f := scan(t, src)
	if len(f.Containers) != 5 {
		t.Fatalf("%d containers", len(f.Containers))
	}
	for i, want := range []string{"__nv_relfatbin", "__nv_relfatbin", ".nv_fatbin", ".data", ".data"} {
		if got := f.SectionOf(&f.Containers[i]); got != want {
			t.Errorf("container %d in %q, want %q", i, got, want)
		}
	}
	p := PlanFile(f, []GPU{{"h100", 90}}, false)
	if p.Whole != "" || p.Edited != 3 {
		t.Fatalf("plan %+v", p)
	}
	if len(p.Warnings) != 1 || !strings.Contains(p.Warnings[0], "2 of 5 fat binaries lie in .data, where the library picks and loads them itself") {
		t.Errorf("warnings %q", p.Warnings)
	}
	var out bytes.Buffer
	if _, err := Prune(&out, bytes.NewReader(src), p); err != nil {
		t.Fatal(err)
	}
	g := scan(t, out.Bytes())
	for i, want := range [][]string{{"sm_90"}, {"sm_90"}, {"sm_90"}, {"sm_80"}, {"compute_70", "sm_90", "sm_50"}} {
		var got []string
		for _, e := range g.Containers[i].Entries {
			got = append(got, e.Name())
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("container %d after: %v, want %v", i, got, want)
		}
	}
	data := section(t, f, ".data")
	if !bytes.Equal(out.Bytes()[data.Off:data.Off+data.Size], src[data.Off:data.Off+data.Size]) {
		t.Error(".data changed")
	}
	// Only the library's own containers: the file stays whole.
	own := scan(t, testimage.FatbinELFSections(testimage.FatbinSection{Name: ".data", Containers: [][]byte{all(1)}}))
	if p := PlanFile(own, []GPU{{"h100", 90}}, false); len(p.Edits) != 0 || !strings.Contains(p.Whole, "no .nv_fatbin or __nv_relfatbin") {
		t.Errorf("library-own containers planned: %+v", p)
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

func TestPlanIdleContainerKeepsOneCubin(t *testing.T) {
	f := scan(t, elfWith(
		container(1, cubin(50, 5), cubin(75, 5), cubin(80, 5), cubin(90, 5)),
		container(2, cubin(80, 5), cubin(86, 5)), // Ampere-only kernels, as cuBLAS has
	))
	p := PlanFile(f, []GPU{{"h100", 90}}, false)
	if p.Edited != 2 || len(p.Warnings) != 1 || !strings.Contains(p.Warnings[0], "1 of 2 fat binaries have code for none") || p.Missing["h100"] != 1 {
		t.Fatalf("%+v", p)
	}
	if want := []string{"sm_86", "sm_90"}; !reflect.DeepEqual(p.Kept, want) {
		t.Errorf("kept %v", p.Kept)
	}
	if want := []string{"sm_50", "sm_75", "sm_80"}; !reflect.DeepEqual(p.Dropped, want) {
		t.Errorf("dropped %v", p.Dropped)
	}
}

// Dropping the PTX of a GPU that keeps its cubin is not a loss: the plan's
// own coverage check must let it through (it once refused it).
func TestPlanDropPTXWhereSASSServes(t *testing.T) {
	p := PlanFile(scan(t, torchLike()), []GPU{{"h100", 90}}, false)
	if p.Whole != "" || p.Edited != 2 {
		t.Fatalf("%+v", p)
	}
	if want := []string{"sm_90", "sm_90a"}; !reflect.DeepEqual(p.Kept, want) {
		t.Errorf("kept %v", p.Kept)
	}
	// A GPU served only through PTX keeps it.
	p = PlanFile(scan(t, torchLike()), []GPU{{"b200", 100}}, false)
	if want := []string{"compute_90"}; p.Whole != "" || !reflect.DeepEqual(p.Kept, want) {
		t.Errorf("b200: %+v", p)
	}
}

func TestPruneFile(t *testing.T) {
	dir := t.TempDir()
	lib := dir + "/libx.so.1"
	src := torchLike()
	if err := os.WriteFile(lib, src, 0o751); err != nil {
		t.Fatal(err)
	}
	old := time.Date(2024, 3, 28, 0, 0, 0, 0, time.UTC)
	os.Chtimes(lib, old, old)
	fleet := []GPU{{"h100", 90}}
	p, err := PruneFile(lib, fleet, true, true)
	if err != nil || p.Edited != 2 {
		t.Fatalf("dry run: %v %+v", err, p)
	}
	if b, _ := os.ReadFile(lib); !bytes.Equal(b, src) {
		t.Fatal("dry run changed the file")
	}
	if _, err := PruneFile(lib, fleet, true, false); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(lib)
	var want bytes.Buffer
	Prune(&want, bytes.NewReader(src), p)
	if !bytes.Equal(got, want.Bytes()) {
		t.Error("file differs from Prune's output")
	}
	fi, _ := os.Stat(lib)
	if fi.Mode().Perm() != 0o751 || !fi.ModTime().Equal(old) {
		t.Errorf("mode %v mtime %v", fi.Mode(), fi.ModTime())
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("left %d files", len(ents))
	}
	// Again: nothing to do, the file is not rewritten.
	if p, err := PruneFile(lib, fleet, true, false); err != nil || p.Edited != 0 {
		t.Errorf("second run: %v %+v", err, p)
	}
}
