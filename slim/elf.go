package slim

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
)

// elfInfo is what the dynamic linker reads from an ELF object: the names it
// needs, the name it answers to and where it looks.
type elfInfo struct {
	// interp is PT_INTERP (the program interpreter, /lib64/ld-linux-x86-64.so.2);
	// set for executables.
	interp  string
	dynamic bool // has PT_DYNAMIC
	soname  string
	needed  []string
	runpath []string // DT_RUNPATH, split on ':'
	rpath   []string // DT_RPATH, split on ':'
	// err says why the object could not be read; prune then treats it
	// as a black box (never dropped, and its needs unknown).
	err string
}

// elfHeadLen is how much of every ELF file is buffered in memory: the ELF
// header and program headers always fit, and the dynamic string table of
// most libraries too.
const elfHeadLen = 1 << 20

// maxELFTable bounds the tables read from an ELF file (program headers,
// dynamic section, one string): real ones are a few KiB.
const maxELFTable = 1 << 20

// maxELFString bounds one dynamic string (a SONAME, a RUNPATH).
const maxELFString = 64 << 10

// isELF reports whether head starts with the ELF magic.
func isELF(head []byte) bool { return len(head) >= 4 && string(head[:4]) == elf.ELFMAG }

// elfStream reads the dynamic-linking facts of an ELF file from a stream,
// in one forward pass. The file's first elfHeadLen bytes are buffered; the
// dynamic section is captured when the stream passes it (wherever it is);
// the strings it names are read from the head, from a spill file or ahead
// in the stream. A linker usually puts .dynstr before .dynamic, beyond the
// head for big libraries, and where it is is only known once .dynamic has
// been read: so when .dynamic lies beyond the head, the bytes between the
// head and the end of the read-only segment that holds .dynstr (or, for old
// single-segment layouts, up to .dynamic) are spilled to a temporary file.
// Nothing else is written, and nothing but the head is held in memory.
type elfStream struct {
	r      io.Reader
	tee    io.Writer // every byte read, when non-nil (CUDA library hashing)
	head   []byte
	pos    int64 // bytes read so far
	tmpDir string

	spill              *os.File
	spillFrom, spillTo int64

	spans []*elfSpan
	buf   []byte
	eof   bool
	order binary.ByteOrder
}

// elfSpan is a byte range wanted from ahead in the stream.
type elfSpan struct {
	off int64
	b   []byte
	got int
}

func (s *elfSpan) full() bool { return s.got == len(s.b) }

// readELF reads r, whose first bytes are head (already read from it: the
// caller peeked), and returns its dynamic-linking facts. r is read at most
// to its end; with tee set, every byte (head included) is written to tee and
// r is drained. Stream errors are returned; a malformed ELF is reported in
// elfInfo.err. headBuf is scratch of elfHeadLen bytes, reused per layer.
func readELF(peek []byte, r io.Reader, tee io.Writer, headBuf []byte, tmpDir string) (info *elfInfo, err error) {
	s := &elfStream{r: r, tee: tee, tmpDir: tmpDir}
	defer s.closeSpill()
	n := copy(headBuf, peek)
	if tee != nil {
		if _, err := tee.Write(peek); err != nil {
			return nil, err
		}
	}
	m, rerr := io.ReadFull(r, headBuf[n:])
	if tee != nil && m > 0 {
		if _, err := tee.Write(headBuf[n : n+m]); err != nil {
			return nil, err
		}
	}
	s.head = headBuf[:n+m]
	s.pos = int64(n + m)
	switch rerr {
	case nil:
	case io.EOF, io.ErrUnexpectedEOF:
		s.eof = true
	default:
		return nil, rerr
	}
	info, err = s.parse()
	if err != nil {
		return nil, err
	}
	if tee != nil && !s.eof {
		if _, err := io.Copy(tee, r); err != nil {
			return nil, err
		}
	}
	return info, nil
}

// ioError marks stream failures (as opposed to a malformed ELF).
type ioError struct{ error }

func (s *elfStream) parse() (info *elfInfo, err error) {
	info = &elfInfo{}
	defer func() {
		var ie ioError
		if errors.As(err, &ie) {
			info, err = nil, ie.error
			return
		}
		if err != nil {
			info, err = &elfInfo{err: err.Error()}, nil
		}
	}()
	is64, phoff, phentsize, phnum, err := s.header()
	if err != nil || phnum == 0 {
		return info, err // phnum 0: relocatable objects, cores: nothing to load
	}
	sg, err := s.segments(is64, phoff, phentsize, phnum)
	if err != nil {
		return nil, err
	}
	var want [][2]int64
	if sg.interp != nil {
		want = append(want, [2]int64{sg.interp.off, sg.interp.filesz})
	}
	if sg.dyn != nil {
		want = append(want, [2]int64{sg.dyn.off, sg.dyn.filesz})
	}
	got, err := s.readMany(want)
	if err != nil {
		return nil, fmt.Errorf("PT_INTERP or PT_DYNAMIC: %w", err)
	}
	if sg.interp != nil {
		info.interp = cstring(got[0])
		got = got[1:]
	}
	if sg.dyn == nil {
		return info, nil
	}
	info.dynamic = true
	strtab, strsz, refs := s.dynamicRefs(got[0], is64)
	if len(refs) == 0 {
		return info, nil
	}
	if strtab < 0 || strsz < 0 {
		return nil, errors.New("dynamic section has no string table")
	}
	return info, s.dynamicStrings(info, sg.loads, strtab, strsz, refs)
}

// header reads the ELF header: the class and the program header table's
// place (setting s.order).
func (s *elfStream) header() (is64 bool, phoff int64, phentsize, phnum int, err error) {
	h := s.head
	if len(h) < elf.EI_NIDENT || !isELF(h) {
		return false, 0, 0, 0, errors.New("not an ELF file")
	}
	switch elf.Class(h[elf.EI_CLASS]) {
	case elf.ELFCLASS64:
		is64 = true
	case elf.ELFCLASS32:
	default:
		return false, 0, 0, 0, fmt.Errorf("unknown ELF class %d", h[elf.EI_CLASS])
	}
	switch elf.Data(h[elf.EI_DATA]) {
	case elf.ELFDATA2LSB:
		s.order = binary.LittleEndian
	case elf.ELFDATA2MSB:
		s.order = binary.BigEndian
	default:
		return false, 0, 0, 0, fmt.Errorf("unknown ELF byte order %d", h[elf.EI_DATA])
	}
	rd := bytes.NewReader(h)
	if is64 {
		var eh elf.Header64
		if err := binary.Read(rd, s.order, &eh); err != nil {
			return false, 0, 0, 0, fmt.Errorf("ELF header: %v", err)
		}
		phoff, phentsize, phnum = int64(eh.Phoff), int(eh.Phentsize), int(eh.Phnum)
		if phnum > 0 && phentsize < binary.Size(elf.Prog64{}) {
			return false, 0, 0, 0, fmt.Errorf("program header entry size %d", phentsize)
		}
	} else {
		var eh elf.Header32
		if err := binary.Read(rd, s.order, &eh); err != nil {
			return false, 0, 0, 0, fmt.Errorf("ELF header: %v", err)
		}
		phoff, phentsize, phnum = int64(eh.Phoff), int(eh.Phentsize), int(eh.Phnum)
		if phnum > 0 && phentsize < binary.Size(elf.Prog32{}) {
			return false, 0, 0, 0, fmt.Errorf("program header entry size %d", phentsize)
		}
	}
	if phnum*phentsize > maxELFTable {
		return false, 0, 0, 0, fmt.Errorf("%d program headers", phnum)
	}
	return is64, phoff, phentsize, phnum, nil
}

// elfSeg is a program header's place in the file and in memory.
type elfSeg struct{ off, vaddr, filesz int64 }

// elfSegs are the segments parse reads: the loaded ones, PT_DYNAMIC and
// PT_INTERP.
type elfSegs struct {
	loads       []elfSeg
	dyn, interp *elfSeg
}

// segments reads the program headers and, when .dynamic lies ahead of the
// stream, keeps what may hold .dynstr on disk until .dynamic says where
// it is.
func (s *elfStream) segments(is64 bool, phoff int64, phentsize, phnum int) (*elfSegs, error) {
	ph, err := s.readAt(phoff, int64(phnum*phentsize))
	if err != nil {
		return nil, fmt.Errorf("program headers: %w", err)
	}
	var sgs elfSegs
	firstLoadExec := true
	for i := 0; i < phnum; i++ {
		b := ph[i*phentsize:]
		var typ elf.ProgType
		var flags elf.ProgFlag
		var sg elfSeg
		if is64 {
			var p elf.Prog64
			binary.Read(bytes.NewReader(b), s.order, &p)
			typ, flags, sg = elf.ProgType(p.Type), elf.ProgFlag(p.Flags), elfSeg{int64(p.Off), int64(p.Vaddr), int64(p.Filesz)}
		} else {
			var p elf.Prog32
			binary.Read(bytes.NewReader(b), s.order, &p)
			typ, flags, sg = elf.ProgType(p.Type), elf.ProgFlag(p.Flags), elfSeg{int64(p.Off), int64(p.Vaddr), int64(p.Filesz)}
		}
		if sg.off < 0 || sg.filesz < 0 {
			return nil, fmt.Errorf("program header %d: bad offset", i)
		}
		switch typ {
		case elf.PT_LOAD:
			if len(sgs.loads) == 0 {
				firstLoadExec = flags&elf.PF_X != 0
			}
			sgs.loads = append(sgs.loads, sg)
		case elf.PT_DYNAMIC:
			d := sg
			sgs.dyn = &d
		case elf.PT_INTERP:
			in := sg
			sgs.interp = &in
		}
	}
	dyn, loads := sgs.dyn, sgs.loads
	if dyn != nil && dyn.off+dyn.filesz > s.pos && !s.eof {
		// .dynamic is ahead: keep what may hold .dynstr on disk until
		// .dynamic tells where .dynstr is.
		end := dyn.off
		if len(loads) > 0 && !firstLoadExec && loads[0].off == 0 {
			end = min(end, loads[0].filesz)
		}
		if end > s.pos {
			s.spillFrom, s.spillTo = s.pos, end
		}
	}
	if sgs.interp != nil && sgs.interp.filesz > maxELFString {
		return nil, fmt.Errorf("PT_INTERP of %d bytes", sgs.interp.filesz)
	}
	if dyn != nil && dyn.filesz > maxELFTable {
		return nil, fmt.Errorf("dynamic section of %d bytes", dyn.filesz)
	}
	return &sgs, nil
}

// dynRef is a dynamic entry naming a string: its tag and offset in the
// string table.
type dynRef struct {
	tag elf.DynTag
	off int64
}

// dynamicRefs reads the dynamic section db: the string table's address
// and size (-1 when absent) and the entries that name strings.
func (s *elfStream) dynamicRefs(db []byte, is64 bool) (strtab, strsz int64, refs []dynRef) {
	strtab, strsz = -1, -1
	entsz := 16
	if !is64 {
		entsz = 8
	}
	for i := 0; i+entsz <= len(db); i += entsz {
		var tag elf.DynTag
		var val int64
		if is64 {
			tag, val = elf.DynTag(s.order.Uint64(db[i:])), int64(s.order.Uint64(db[i+8:]))
		} else {
			tag, val = elf.DynTag(int32(s.order.Uint32(db[i:]))), int64(s.order.Uint32(db[i+4:]))
		}
		if tag == elf.DT_NULL {
			break
		}
		switch tag {
		case elf.DT_STRTAB:
			strtab = val
		case elf.DT_STRSZ:
			strsz = val
		case elf.DT_NEEDED, elf.DT_SONAME, elf.DT_RUNPATH, elf.DT_RPATH:
			refs = append(refs, dynRef{tag, val})
		}
	}
	return strtab, strsz, refs
}

// dynamicStrings reads refs' strings into info: DT_STRTAB is an address,
// mapped to a file offset through the PT_LOAD segment that holds it.
func (s *elfStream) dynamicStrings(info *elfInfo, loads []elfSeg, strtab, strsz int64, refs []dynRef) error {
	stroff := int64(-1)
	for _, l := range loads {
		if strtab >= l.vaddr && strtab < l.vaddr+l.filesz {
			stroff = l.off + (strtab - l.vaddr)
			break
		}
	}
	if stroff < 0 {
		return fmt.Errorf("string table address %#x is in no loaded segment", strtab)
	}
	// All strings at once: a window each, clamped to the table and to
	// what can still be had, so no read passes another's bytes.
	var ranges [][2]int64
	for _, rf := range refs {
		if rf.off < 0 || rf.off >= strsz {
			return fmt.Errorf("%s string offset %d outside the %d-byte string table", rf.tag, rf.off, strsz)
		}
		off := stroff + rf.off
		n := min(strsz-rf.off, maxELFString)
		if c := s.contiguous(off); c > off {
			n = min(n, c-off)
		}
		ranges = append(ranges, [2]int64{off, n})
	}
	strs, err := s.readMany(ranges)
	if err != nil {
		return fmt.Errorf("dynamic strings: %w", err)
	}
	for i, rf := range refs {
		j := bytes.IndexByte(strs[i], 0)
		if j < 0 {
			return fmt.Errorf("%s string at %d is not terminated", rf.tag, rf.off)
		}
		b := string(strs[i][:j])
		switch rf.tag {
		case elf.DT_NEEDED:
			info.needed = append(info.needed, b)
		case elf.DT_SONAME:
			info.soname = b
		case elf.DT_RUNPATH:
			info.runpath = append(info.runpath, splitPath(b)...)
		case elf.DT_RPATH:
			info.rpath = append(info.rpath, splitPath(b)...)
		}
	}
	return nil
}

func splitPath(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ":") {
		if p != "" {
			out = append(out, p)
		}
	}
	return out
}

func cstring(b []byte) string {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return string(b)
}

// kept is the end of the spilled bytes so far (spillFrom when none).
func (s *elfStream) kept() int64 {
	if s.spill == nil {
		return s.spillFrom
	}
	return min(s.spillTo, s.pos)
}

// contiguous is the end of the bytes readable from off without a gap
// (math.MaxInt64 when off is ahead in the stream).
func (s *elfStream) contiguous(off int64) int64 {
	end := off
	if end < int64(len(s.head)) {
		end = int64(len(s.head))
	}
	if s.spill != nil && end >= s.spillFrom && end < s.kept() {
		end = s.kept()
	}
	if end >= s.pos {
		return 1<<63 - 1
	}
	return end
}

// readAt returns n bytes at off (see readMany).
func (s *elfStream) readAt(off, n int64) ([]byte, error) {
	bs, err := s.readMany([][2]int64{{off, n}})
	if err != nil {
		return nil, err
	}
	return bs[0], nil
}

// readMany returns the byte ranges {off, n}, piecewise from the head, the
// spill and ahead in the stream. Ranges ahead are all registered before
// the stream moves, so reading one never passes another. Bytes the stream
// has passed and nothing kept are an error.
func (s *elfStream) readMany(rs [][2]int64) ([][]byte, error) {
	out := make([][]byte, len(rs))
	var pending []*elfSpan
	for i, r := range rs {
		off, n := r[0], r[1]
		if off < 0 || n < 0 || off > 1<<62 || n > maxELFTable {
			return nil, errors.New("bad offset or size")
		}
		end := off + n
		if end <= int64(len(s.head)) {
			out[i] = s.head[off:end]
			continue
		}
		if s.contiguous(off) < end {
			return nil, fmt.Errorf("bytes %d..%d were passed before their place was known", off, end)
		}
		b := make([]byte, n)
		out[i] = b
		at := off
		if at < int64(len(s.head)) {
			at += int64(copy(b, s.head[at:]))
		}
		if s.spill != nil && at < end && at >= s.spillFrom && at < s.kept() {
			k := min(end, s.kept()) - at
			if _, err := s.spill.ReadAt(b[at-off:at-off+k], at-s.spillFrom); err != nil {
				return nil, ioError{fmt.Errorf("spill: %w", err)}
			}
			at += k
		}
		if at < end {
			// The rest is ahead (contiguous() said so).
			sp := &elfSpan{off: at, b: b[at-off:]}
			s.spans = append(s.spans, sp)
			pending = append(pending, sp)
		}
	}
	all := func() bool {
		for _, sp := range pending {
			if !sp.full() {
				return false
			}
		}
		return true
	}
	if err := s.advance(all); err != nil {
		return nil, err
	}
	if !all() {
		return nil, fmt.Errorf("file ends at %d, before the bytes it points to", s.pos)
	}
	return out, nil
}

// advance reads forward until done() or the end of the stream, feeding the
// tee, the spill and the wanted spans.
func (s *elfStream) advance(done func() bool) error {
	if s.buf == nil {
		s.buf = make([]byte, 64<<10)
	}
	for !done() && !s.eof {
		k, err := s.r.Read(s.buf)
		if k > 0 {
			chunk := s.buf[:k]
			if s.tee != nil {
				if _, werr := s.tee.Write(chunk); werr != nil {
					return ioError{werr}
				}
			}
			if err := s.feed(chunk); err != nil {
				return ioError{err}
			}
			s.pos += int64(k)
		}
		if err == io.EOF {
			s.eof = true
		} else if err != nil {
			return ioError{err}
		}
	}
	return nil
}

func (s *elfStream) feed(chunk []byte) error {
	lo, hi := s.pos, s.pos+int64(len(chunk))
	if s.spillTo > s.spillFrom && lo < s.spillTo && hi > s.spillFrom {
		if s.spill == nil {
			f, err := os.CreateTemp(s.tmpDir, ".elf-spill-*")
			if err != nil {
				return err
			}
			s.spill = f
		}
		a, b := max(lo, s.spillFrom), min(hi, s.spillTo)
		if _, err := s.spill.WriteAt(chunk[a-lo:b-lo], a-s.spillFrom); err != nil {
			return err
		}
	}
	for _, sp := range s.spans {
		if sp.full() {
			continue
		}
		a, b := max(lo, sp.off+int64(sp.got)), min(hi, sp.off+int64(len(sp.b)))
		if a < b {
			copy(sp.b[a-sp.off:], chunk[a-lo:b-lo])
			sp.got += int(b - a)
		}
	}
	return nil
}

func (s *elfStream) closeSpill() {
	if s.spill != nil {
		s.spill.Close()
		os.Remove(s.spill.Name())
	}
}
