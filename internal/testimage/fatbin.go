package testimage

import (
	"bytes"
	"encoding/binary"
)

// FatbinEntry is a fat-binary entry to synthesise: kind (1 PTX, 2 cubin),
// architecture (90 for sm_90), flags and payload length.
type FatbinEntry struct {
	Kind  uint16
	Arch  int
	Flags uint64
	N     int
}

// Entry flags as nvcc sets them: 64-bit, Linux host, compressed payload;
// arch-specific code (sm_90a) adds 0x100000.
const (
	fatbinFlags        = 0x1 | 0x10 | 0x2000
	fatbinArchSpecific = 0x100000
)

// Cubin is SASS for sm_<arch>; CubinA the arch-specific sm_<arch>a; PTX
// is compute_<arch>.
func Cubin(arch, n int) FatbinEntry { return FatbinEntry{2, arch, fatbinFlags, n} }
func CubinA(arch, n int) FatbinEntry {
	return FatbinEntry{2, arch, fatbinFlags | fatbinArchSpecific, n}
}
func PTX(arch, n int) FatbinEntry { return FatbinEntry{1, arch, fatbinFlags, n} }

// FatbinContainer builds a fat binary as nvcc lays it out; payload bytes
// are derived from the container id, entry and position (never zero), so
// moves and zeroing are visible.
func FatbinContainer(id int, es ...FatbinEntry) []byte {
	le := binary.LittleEndian
	var body bytes.Buffer
	for j, e := range es {
		h := make([]byte, 72)
		le.PutUint16(h[0:], e.Kind)
		le.PutUint16(h[2:], 0x0101)
		le.PutUint32(h[4:], 72)
		le.PutUint64(h[8:], uint64(e.N))
		le.PutUint32(h[16:], uint32(e.N))
		le.PutUint32(h[28:], uint32(e.Arch))
		le.PutUint64(h[40:], e.Flags)
		body.Write(h)
		for k := 0; k < e.N; k++ {
			body.WriteByte(byte(1 + (id*31+j*7+k)%250))
		}
	}
	hdr := make([]byte, 16)
	copy(hdr, []byte{0x50, 0xed, 0x55, 0xba})
	le.PutUint16(hdr[4:], 1)
	le.PutUint16(hdr[6:], 16)
	le.PutUint64(hdr[8:], uint64(body.Len()))
	return append(hdr, body.Bytes()...)
}

// FatbinELF builds a little-endian ELF64 shared object as ld lays one out:
// a header, some text, the containers in .nv_fatbin, data with a magic
// look-alike in it, .shstrtab and the section header table at the end.
func FatbinELF(containers ...[]byte) []byte {
	return FatbinELFSections(FatbinSection{".nv_fatbin", containers})
}

// FatbinSection is a section of containers for FatbinELFSections.
type FatbinSection struct {
	Name       string
	Containers [][]byte
}

// FatbinELFSections is FatbinELF with the containers in the sections
// given, in order (an -rdc build's __nv_relfatbin before its .nv_fatbin,
// a library's own containers in .data).
func FatbinELFSections(secs ...FatbinSection) []byte {
	le := binary.LittleEndian
	f := make([]byte, 64)
	copy(f, "\x7fELF")
	f[4], f[5], f[6] = 2, 1, 1
	le.PutUint16(f[16:], 3) // ET_DYN
	f = append(f, bytes.Repeat([]byte{0x90}, 200)...)
	type placed struct{ name, off, size int }
	names := "\x00.text\x00.shstrtab\x00"
	var at []placed
	for _, s := range secs {
		off := len(f)
		for _, c := range s.Containers {
			f = append(f, c...)
		}
		at = append(at, placed{len(names), off, len(f) - off})
		names += s.Name + "\x00"
		for len(f)%8 != 0 {
			f = append(f, 0)
		}
	}
	f = append(f, 0x50, 0xed, 0x55, 0xba, 7, 7, 7, 7, 1, 2, 3, 4)
	strOff := len(f)
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
	sec(7, 3, 0, strOff, len(names))
	for _, p := range at {
		sec(uint32(p.name), 1, 2, p.off, p.size)
	}
	le.PutUint64(f[0x28:], uint64(shoff))
	le.PutUint16(f[0x3a:], 64)
	le.PutUint16(f[0x3c:], uint16(3+len(at)))
	le.PutUint16(f[0x3e:], 2)
	return f
}
