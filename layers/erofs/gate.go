package erofs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/kiln-build/kiln/layers"
)

// errMkfsGone marks a write to mkfs.erofs that failed: it exited, and
// its own complaint is the error to report.
var errMkfsGone = errors.New("mkfs.erofs stopped reading")

// tarGate passes a tar stream's bytes on to w only once kiln's reader
// (layers.WalkTar, Go's archive/tar) has accepted them: an entry's header
// blocks when the header parsed and passed layers.CheckEntry, its data as
// it is read, and the end marker when the reader ends there. What the
// reader refuses (a lone zero block followed by more headers, a truncated
// entry) never reaches w, so mkfs.erofs converts exactly the tar that
// slim, analyze and every tar reader see. The bytes are the original
// ones: the image is the one containerd's converter makes of the layer.
type tarGate struct {
	r    io.Reader
	w    io.Writer
	held bytes.Buffer // read, not yet accepted
	open bool         // an accepted entry's data: passed on as read
	n    int64        // bytes read
}

func (g *tarGate) Read(p []byte) (int, error) {
	n, err := g.r.Read(p)
	g.n += int64(n)
	if !g.open {
		g.held.Write(p[:n])
		return n, err
	}
	if _, werr := g.w.Write(p[:n]); werr != nil {
		return n, fmt.Errorf("%w: %v", errMkfsGone, werr)
	}
	return n, err
}

// accept passes the held bytes on.
func (g *tarGate) accept() error {
	if _, err := g.held.WriteTo(g.w); err != nil {
		return fmt.Errorf("%w: %v", errMkfsGone, err)
	}
	return nil
}

// feed passes the tar read from r to w through a tarGate, entries
// declaring more than max bytes in all refused, and then reads r to its
// end (a reader that checks a digest at EOF gets to), where only zeros
// may follow the tar's end marker.
func feed(ctx context.Context, r io.Reader, w io.Writer, max int64) error {
	g := &tarGate{r: r, w: w}
	// Data passes in 256 KiB writes (io.Discard would read in 8 KiB).
	buf := make([]byte, 256<<10)
	var refused error // the entry's, not the reader's
	err := layers.WalkTar(ctx, g, func(e *layers.Entry, body io.Reader) error {
		if refused = layers.CheckEntry(e); refused != nil {
			return refused
		}
		if size := e.Header.Size; size > max-g.n {
			refused = fmt.Errorf("entry %q declares %d bytes, more than the layer can hold (%d bytes, %d of them read): refusing a truncated or hostile layer", e.Header.Name, size, max, g.n)
			return refused
		}
		if err := g.accept(); err != nil {
			return err
		}
		g.open = true
		_, err := io.CopyBuffer(struct{ io.Writer }{io.Discard}, body, buf)
		g.open = false
		if err != nil {
			return fmt.Errorf("entry %q: %w", e.Header.Name, err)
		}
		return nil
	})
	switch {
	case err == nil:
	case errors.Is(err, errMkfsGone) || err == refused:
		return err
	default:
		return fmt.Errorf("the layer is not a tar kiln can read: %w", err)
	}
	if err := g.accept(); err != nil { // the end marker
		return err
	}
	return zerosToEnd(r)
}

// zerosToEnd reads r to its end, refusing anything but zeros: data after
// a tar's end marker is no part of the layer as tar readers see it.
func zerosToEnd(r io.Reader) error {
	buf := make([]byte, 32<<10)
	var n int64
	for {
		k, err := r.Read(buf)
		for i, c := range buf[:k] {
			if c != 0 {
				return fmt.Errorf("the layer has data after the tar's end marker (at %d bytes past it): kiln converts only the tar it reads, and refuses a layer that hides more", n+int64(i))
			}
		}
		n += int64(k)
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}
