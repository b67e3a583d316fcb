package fatbin

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
)

var zeros [32 << 10]byte

// Prune copies src to dst applying the plan's edits: in each edited
// container the kept entries move to the front in order, the header's size
// shrinks to cover them, and the dropped entries' bytes are written as
// zeros after them. Everything else is copied as it is, so dst gets exactly
// as many bytes as src had. The headers met in src must be the ones the
// plan was made from (the same file read again); anything else is an
// error, and what was written must then be discarded.
func Prune(dst io.Writer, src io.Reader, p *Plan) (int64, error) {
	br := bufio.NewReaderSize(src, window)
	var pos, written int64
	copyN := func(n int64) error {
		m, err := io.CopyN(dst, br, n)
		pos += m
		written += m
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return err
	}
	skipN := func(n int64) error {
		m, err := io.CopyN(io.Discard, br, n)
		pos += m
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return err
	}
	le := binary.LittleEndian
	for i := range p.Edits {
		ed := &p.Edits[i]
		c := &ed.Container
		if c.Off < pos || len(ed.Keep) != len(c.Entries) {
			return written, fmt.Errorf("fat binary edits out of order at offset %d", c.Off)
		}
		if err := copyN(c.Off - pos); err != nil {
			return written, err
		}
		hdr := make([]byte, c.Header)
		n, err := io.ReadFull(br, hdr)
		pos += int64(n)
		if err != nil {
			return written, err
		}
		if string(hdr[:4]) != string(magic) || int64(le.Uint64(hdr[8:])) != c.Size {
			return written, fmt.Errorf("fat binary at offset %d is not the one scanned", c.Off)
		}
		le.PutUint64(hdr[8:], uint64(ed.NewSize()))
		m, err := dst.Write(hdr)
		written += int64(m)
		if err != nil {
			return written, err
		}
		var dropped int64
		for j, e := range c.Entries {
			h, err := br.Peek(entryMinHeader)
			if err != nil {
				return written, fmt.Errorf("fat binary at offset %d: entry %d: %w", c.Off, j, err)
			}
			if pos != e.Off || Kind(le.Uint16(h[0:])) != e.Kind || int64(le.Uint32(h[4:])) != e.Header || int64(le.Uint64(h[8:])) != e.Size {
				return written, fmt.Errorf("fat binary at offset %d: entry %d is not the one scanned", c.Off, j)
			}
			if ed.Keep[j] {
				err = copyN(e.Len())
			} else {
				err = skipN(e.Len())
				dropped += e.Len()
			}
			if err != nil {
				return written, err
			}
		}
		for dropped > 0 {
			k := min(dropped, int64(len(zeros)))
			m, err := dst.Write(zeros[:k])
			written += int64(m)
			if err != nil {
				return written, err
			}
			dropped -= k
		}
	}
	m, err := io.Copy(dst, br)
	written += m
	return written, err
}
