package fatbin

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"path"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/kiln-build/kiln/internal/atomicfile"
)

// Kind is what an entry's payload is.
type Kind uint16

// The kinds nvcc writes.
const (
	KindPTX   Kind = 1
	KindCubin Kind = 2
)

// Entry flags. Only entries whose flags are all known are ever dropped.
const (
	flag64Bit      = 0x1
	flagDebug      = 0x2
	flagLinux      = 0x10
	flagCompressed = 0x2000
	// flagArchSpecific marks arch-specific code (sm_90a): it runs only on
	// exactly its architecture. Checked against cuobjdump 12.4 on Debian's
	// libtorch_cuda, whose two entries with this bit are its sm_90a cubins.
	flagArchSpecific = 0x100000
	knownFlags       = flag64Bit | flagDebug | flagLinux | flagCompressed | flagArchSpecific
)

var magic = []byte{0x50, 0xed, 0x55, 0xba} // 0xBA55ED50, little-endian

const (
	containerHeaderLen = 16
	entryMinHeader     = 32 // kind, version, header size, payload size ... arch at 28
	entryFlagsEnd      = 48 // flags at 40
	window             = 1 << 20
	// Windows of the file kept for locating the .nv_fatbin section: the
	// ELF header sits at the start, the section header table near the end
	// with the section names (.shstrtab) just before it.
	headWindow = 64 << 10
	tailWindow = 64 << 10
	maxSHTable = 1 << 20
)

// Entry is one cubin or PTX in a container.
type Entry struct {
	Off    int64 // file offset of the entry's header
	Header int64 // header size
	Size   int64 // payload size as the header gives it (padding included)
	Kind   Kind
	Arch   int // 90 for sm_90 and compute_90
	Flags  uint64
	// flagsRead is false for short headers that end before the flags.
	flagsRead bool
}

// Len is the entry's size in the container, header included.
func (e Entry) Len() int64 { return e.Header + e.Size }

// ArchSpecific reports sm_XYa code, which runs only on sm_XY.
func (e Entry) ArchSpecific() bool { return e.Flags&flagArchSpecific != 0 }

// Known reports whether the entry's kind and flags are all understood: an
// entry that is not known is never dropped.
func (e Entry) Known() bool {
	return e.flagsRead && (e.Kind == KindPTX || e.Kind == KindCubin) && e.Flags&^knownFlags == 0
}

// Name is the architecture as nvcc spells it: sm_90, sm_90a, compute_90.
func (e Entry) Name() string {
	switch e.Kind {
	case KindPTX:
		return "compute_" + strconv.Itoa(e.Arch)
	case KindCubin:
		if e.ArchSpecific() {
			return "sm_" + strconv.Itoa(e.Arch) + "a"
		}
		return "sm_" + strconv.Itoa(e.Arch)
	}
	return fmt.Sprintf("kind%d_%d", e.Kind, e.Arch)
}

// Container is one fat binary.
type Container struct {
	Off     int64 // file offset of the header
	Header  int64 // header size
	Size    int64 // bytes of entries the header declares
	Entries []Entry
	// Complete says the entries were walked exactly to Size; only
	// complete containers are edited.
	Complete bool
}

// End is the offset just past the container.
func (c *Container) End() int64 { return c.Off + c.Header + c.Size }

// Section is a named file range of an ELF file.
type Section struct {
	Name      string
	Off, Size int64
}

// registered are the sections whose containers the CUDA runtime registers
// through the __fatBinC_Wrapper_t records of .nvFatBinSegment: .nv_fatbin
// (a whole program's, or a device-linked -rdc one's, device code) and
// __nv_relfatbin (the relocatable objects of an -rdc build, which the
// runtime is handed beside the linked image and links through JIT only when
// that image has nothing for the GPU). The driver reads their containers
// by their headers, so editing within a container is safe. Containers
// anywhere else (cuFFT's 17,607 in .data, cuSPARSE's in .rodata) are the
// library's own: it picks and loads them by tables kiln cannot read, and
// they are never edited.
var registered = []string{".nv_fatbin", "__nv_relfatbin"}

// File is what Scan found in one file.
type File struct {
	Size       int64
	Containers []Container
	// Sections are the file's sections with contents in the file, in
	// section header order; nil when they could not be read (SectionErr
	// says why).
	Sections   []Section
	SectionErr string
}

// Archs lists the architectures of every entry, as Entry.Name spells
// them, sorted.
func (f *File) Archs() []string {
	seen := map[string]bool{}
	for _, c := range f.Containers {
		for _, e := range c.Entries {
			seen[e.Name()] = true
		}
	}
	return sortedNames(seen)
}

// SectionOf names the section holding the container, "" when none does.
func (f *File) SectionOf(c *Container) string {
	for _, s := range f.Sections {
		if c.Off >= s.Off && c.End() <= s.Off+s.Size {
			return s.Name
		}
	}
	return ""
}

// Registered reports whether the file has a section whose containers the
// CUDA runtime registers (.nv_fatbin, __nv_relfatbin).
func (f *File) Registered() bool {
	for _, s := range f.Sections {
		if slices.Contains(registered, s.Name) {
			return true
		}
	}
	return false
}

// Editable reports whether c may be rewritten: walked exactly, and inside
// a section whose containers the CUDA runtime registers.
func (f *File) Editable(c *Container) bool {
	return c.Complete && slices.Contains(registered, f.SectionOf(c))
}

// IsSharedObject says whether a file name is a shared library's (lib.so,
// lib.so.12.4): the files worth scanning for device code. A temporary
// file a writer left beside one (.libx.so.1.*.tmp, TempPrefix's) is not.
func IsSharedObject(p string) bool {
	b := path.Base(p)
	if atomicfile.IsTemp(b) {
		return false
	}
	return strings.HasSuffix(b, ".so") || strings.Contains(b, ".so.")
}

// Scan reads r to its end and returns the fat binaries in it. Bytes that
// only look like the magic are rejected by the header checks and the scan
// goes on; a container whose entries do not add up is recorded as
// incomplete. Read errors are returned.
func Scan(r io.Reader) (*File, error) {
	cr := &capture{r: r, tailFrom: -1}
	br := bufio.NewReaderSize(cr, window)
	f := &File{}
	var pos int64
	discard := func(n int64) error {
		m, err := io.CopyN(io.Discard, br, n)
		pos += m
		return err
	}
	le := binary.LittleEndian
	for {
		win, err := br.Peek(window)
		if len(win) < containerHeaderLen {
			if err != nil && err != io.EOF {
				return nil, err
			}
			break
		}
		i := bytes.Index(win, magic)
		if i < 0 {
			if err := discard(int64(len(win) - (len(magic) - 1))); err != nil {
				return nil, err
			}
			continue
		}
		if err := discard(int64(i)); err != nil {
			return nil, err
		}
		hdr, err := br.Peek(containerHeaderLen)
		if err != nil {
			break // a magic in the last bytes of the file
		}
		version, hsize, total := le.Uint16(hdr[4:]), int64(le.Uint16(hdr[6:])), int64(le.Uint64(hdr[8:]))
		if version != 1 || hsize < containerHeaderLen || hsize > 256 || total <= 0 || total > 8<<30 {
			if err := discard(1); err != nil {
				return nil, err
			}
			continue
		}
		c := Container{Off: pos, Header: hsize, Size: total}
		if err := discard(hsize); err != nil {
			f.Containers = append(f.Containers, c)
			break
		}
		left := total
		for left > 0 {
			e, err := br.Peek(entryMinHeader)
			if err != nil {
				break
			}
			ent := Entry{Off: pos, Kind: Kind(le.Uint16(e[0:])), Header: int64(le.Uint32(e[4:])), Size: int64(le.Uint64(e[8:])), Arch: int(le.Uint32(e[28:]))}
			if ent.Header < entryMinHeader || ent.Header > 4096 || ent.Size < 0 || ent.Len() > left || ent.Arch < 10 || ent.Arch > 1000 {
				break // not what nvcc writes: stop reading this container
			}
			if ent.Header >= entryFlagsEnd {
				if e, err := br.Peek(entryFlagsEnd); err == nil {
					ent.Flags, ent.flagsRead = le.Uint64(e[40:]), true
				}
			}
			if err := discard(ent.Len()); err != nil {
				break
			}
			c.Entries = append(c.Entries, ent)
			left -= ent.Len()
		}
		c.Complete = left == 0
		f.Containers = append(f.Containers, c)
	}
	if _, err := io.Copy(io.Discard, br); err != nil {
		return nil, err
	}
	f.Size = cr.n
	f.Sections, f.SectionErr = cr.sections()
	return f, nil
}

// capture passes a stream through, keeping the file's first headWindow
// bytes and the window before and including the section header table.
type capture struct {
	r        io.Reader
	n        int64
	head     []byte
	tail     []byte
	tailFrom int64 // -1 until known from the ELF header
	tailTo   int64
	shoff    int64
	shent    int
	shnum    int
	shstrndx int
	elfErr   string
}

func (c *capture) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	b := p[:n]
	off := c.n
	c.n += int64(n)
	if off < headWindow {
		k := min(int64(len(b)), headWindow-off)
		c.head = append(c.head, b[:k]...)
		if c.tailFrom < 0 && c.elfErr == "" && len(c.head) >= 64 {
			c.readELFHeader()
			// Bytes before this read (fewer than 64) are only in head.
			if c.tailFrom >= 0 && c.tailFrom < off {
				c.tail = append(c.tail, c.head[c.tailFrom:min(off, c.tailTo)]...)
			}
		}
	}
	if c.tailFrom >= 0 {
		end := off + int64(n)
		from, to := max(off, c.tailFrom), min(end, c.tailTo)
		if from < to {
			c.tail = append(c.tail, b[from-off:to-off]...)
		}
	}
	return n, err
}

func (c *capture) readELFHeader() {
	h := c.head
	if string(h[:4]) != "\x7fELF" {
		c.elfErr = "not an ELF file"
		return
	}
	if h[4] != 2 || h[5] != 1 {
		c.elfErr = "not a little-endian 64-bit ELF file"
		return
	}
	le := binary.LittleEndian
	c.shoff = int64(le.Uint64(h[0x28:]))
	c.shent, c.shnum, c.shstrndx = int(le.Uint16(h[0x3a:])), int(le.Uint16(h[0x3c:])), int(le.Uint16(h[0x3e:]))
	if c.shoff <= 0 || c.shent < 64 || c.shnum == 0 || int64(c.shent*c.shnum) > maxSHTable || c.shstrndx >= c.shnum {
		c.elfErr = "no readable section header table"
		return
	}
	c.tailFrom = max(0, c.shoff-tailWindow)
	c.tailTo = c.shoff + int64(c.shent*c.shnum)
}

// at returns n bytes at file offset off from the captured windows.
func (c *capture) at(off, n int64) ([]byte, bool) {
	if off >= 0 && off+n <= int64(len(c.head)) {
		return c.head[off : off+n], true
	}
	if c.tailFrom >= 0 && off >= c.tailFrom && off+n <= c.tailFrom+int64(len(c.tail)) {
		return c.tail[off-c.tailFrom : off-c.tailFrom+n], true
	}
	return nil, false
}

// sections reads the section headers and names from the captured windows:
// every section with contents in the file (not SHT_NOBITS).
func (c *capture) sections() ([]Section, string) {
	if c.elfErr != "" {
		return nil, c.elfErr
	}
	if c.tailFrom < 0 {
		return nil, "file too short for an ELF header"
	}
	le := binary.LittleEndian
	sh := func(i int) []byte {
		b, _ := c.at(c.shoff+int64(i*c.shent), int64(c.shent))
		return b
	}
	str := sh(c.shstrndx)
	if str == nil {
		return nil, "section header table not in the file"
	}
	names, ok := c.at(int64(le.Uint64(str[24:])), int64(le.Uint64(str[32:])))
	if !ok {
		return nil, "section names (.shstrtab) not next to the section header table"
	}
	const shtNull, shtNobits = 0, 8
	var out []Section
	for i := 0; i < c.shnum; i++ {
		s := sh(i)
		if s == nil {
			return nil, "section header table truncated"
		}
		if t := le.Uint32(s[4:]); t == shtNull || t == shtNobits {
			continue
		}
		name := int(le.Uint32(s[0:]))
		if name >= len(names) {
			continue
		}
		end := bytes.IndexByte(names[name:], 0)
		if end < 0 {
			continue
		}
		out = append(out, Section{Name: string(names[name : name+end]), Off: int64(le.Uint64(s[24:])), Size: int64(le.Uint64(s[32:]))})
	}
	return out, ""
}

func sortedNames(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Slice(out, func(i, j int) bool { return archLess(out[i], out[j]) })
	return out
}

// archLess orders sm_ before compute_, then by number, then the a variant.
func archLess(a, b string) bool {
	ka, na, sa := archKey(a)
	kb, nb, sb := archKey(b)
	if ka != kb {
		return ka < kb
	}
	if na != nb {
		return na < nb
	}
	return sa < sb
}

func archKey(s string) (int, int, string) {
	kind := 2
	rest := s
	switch {
	case len(s) > 3 && s[:3] == "sm_":
		kind, rest = 0, s[3:]
	case len(s) > 8 && s[:8] == "compute_":
		kind, rest = 1, s[8:]
	}
	i := 0
	for i < len(rest) && rest[i] >= '0' && rest[i] <= '9' {
		i++
	}
	n, _ := strconv.Atoi(rest[:i])
	return kind, n, rest[i:]
}
