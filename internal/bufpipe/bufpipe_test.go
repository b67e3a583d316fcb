package bufpipe_test

import (
	"bytes"
	"errors"
	"io"
	"math/rand"
	"testing"

	"github.com/kiln-build/kiln/internal/bufpipe"
)

func TestPipeCarriesEveryByteInOrder(t *testing.T) {
	t.Parallel()
	data := make([]byte, 5<<20+3)
	rand.New(rand.NewSource(1)).Read(data)
	p := bufpipe.New(64<<10, 4)
	go func() {
		r := bytes.NewReader(data)
		buf := make([]byte, 100_000) // not a multiple of the pipe's buffers
		_, err := io.CopyBuffer(p, r, buf)
		p.CloseWrite(err)
	}()
	got, err := io.ReadAll(p)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read %d bytes (err %v), want the %d written", len(got), err, len(data))
	}
}

func TestPipeCloses(t *testing.T) {
	t.Parallel()
	// The writer's error reaches the reader after what was queued.
	p := bufpipe.New(16, 2)
	boom := errors.New("boom")
	go func() { p.Write([]byte("hello")); p.CloseWrite(boom) }()
	got, err := io.ReadAll(p)
	if string(got) != "hello" || !errors.Is(err, boom) {
		t.Fatalf("read %q, %v; want hello then boom", got, err)
	}
	// A reader that stops fails the writer, even a blocked one.
	p = bufpipe.New(16, 1)
	stop := errors.New("stopped")
	done := make(chan error)
	go func() {
		_, err := p.Write(make([]byte, 1<<20))
		done <- err
	}()
	p.CloseRead(stop)
	if err := <-done; !errors.Is(err, stop) {
		t.Fatalf("write after the reader closed: %v, want %v", err, stop)
	}
}
