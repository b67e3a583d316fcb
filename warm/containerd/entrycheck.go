package containerd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"sync"

	"github.com/kiln-build/kiln/internal/bytesize"
	"github.com/kiln-build/kiln/internal/preflight"
	"github.com/kiln-build/kiln/layers"
)

// entryCheck runs kiln's tar reader (layers.WalkTar) with its one entry
// rule (layers.CheckEntry) over a decoded layer, in lockstep with the
// applier: a chunk is handed on only once the reader has consumed it
// and asked for more, so every header in it was parsed and accepted.
// A header the rule refuses (a GNU-sparse file the applier would write
// densely, a path out of the root, type V) never reaches the applier.
type entryCheck struct {
	next  chan []byte   // chunks for the reader
	need  chan struct{} // the reader used all it was given
	done  chan struct{} // closed when the reader returned
	err   error         // why, once done
	cur   []byte
	asked bool // a need was received and not yet answered
	once  sync.Once
}

// errRefusedEntry marks an entry the rule refused: the layer must not be
// applied by any other means either.
var errRefusedEntry = errors.New("refused by kiln's entry rule")

// newEntryCheck starts the reader. dir is where the layer unpacks: the
// sizes its entries declare are counted against the space free there
// when the apply starts ("" counts nothing).
func newEntryCheck(ctx context.Context, dir string) *entryCheck {
	c := &entryCheck{next: make(chan []byte), need: make(chan struct{}), done: make(chan struct{})}
	room := roomIn(dir)
	go func() {
		defer close(c.done)
		var declared int64
		c.err = layers.WalkTar(ctx, c, func(e *layers.Entry, _ io.Reader) error {
			if err := layers.CheckEntry(e); err != nil {
				return &refusedError{err}
			}
			if declared += e.Header.Size; declared > room {
				return &refusedError{fmt.Errorf("entry %q brings the files the layer declares to %s, more than the %s free in %s where it unpacks: free some space there (or warm without --unpack)", e.Header.Name, bytesize.Format(declared), bytesize.Format(room), dir)}
			}
			return nil
		})
		if c.err == nil {
			// After the end marker: padding, hashed by the applier.
			_, c.err = io.Copy(io.Discard, c)
		}
	}()
	return c
}

// Read is the reader's side: it asks for a chunk when it has used the
// last one.
func (c *entryCheck) Read(p []byte) (int, error) {
	for len(c.cur) == 0 {
		c.need <- struct{}{}
		b, ok := <-c.next
		if !ok {
			return 0, io.EOF
		}
		c.cur = b
	}
	n := copy(p, c.cur)
	c.cur = c.cur[n:]
	return n, nil
}

// pass hands b to the reader and returns once the reader has consumed
// it and asked for more (nil: b may go on to the applier), or with the
// reader's error.
func (c *entryCheck) pass(b []byte) error {
	if !c.asked {
		if err := c.wait(); err != nil {
			return err
		}
	}
	select {
	case c.next <- b:
	case <-c.done:
		return c.result()
	}
	c.asked = false
	return c.wait()
}

func (c *entryCheck) wait() error {
	select {
	case <-c.need:
		c.asked = true
		return nil
	case <-c.done:
		return c.result()
	}
}

func (c *entryCheck) result() error {
	if c.err == nil {
		return errors.New("kiln's tar reader stopped early")
	}
	return c.err
}

// close ends the reader's input, waits for it and returns its error.
func (c *entryCheck) close() error {
	c.once.Do(func() {
		close(c.next)
		for {
			select {
			case <-c.need:
			case <-c.done:
				return
			}
		}
	})
	return c.err
}

// refusedError is an entry the rule refused, in the rule's words.
type refusedError struct{ err error }

func (e *refusedError) Error() string { return e.err.Error() }
func (e *refusedError) Unwrap() []error {
	return []error{e.err, errRefusedEntry}
}

// roomIn is the space free in dir, the most a layer unpacked there can
// write; no limit when dir is "" or cannot be asked.
func roomIn(dir string) int64 {
	if dir == "" {
		return math.MaxInt64
	}
	n, err := preflight.Free(dir)
	if err != nil {
		return math.MaxInt64
	}
	return n
}
