// Package blobtest is the conformance suite every blob.Writer passes, in
// the shape of containerd's content testsuite (core/content/testsuite):
// a writer that commits, a commit over an existing blob, resume after
// Close and after Abort, and the commit error states (short, long, wrong
// digest, commit twice, abort after commit). Run it from a test of the
// package that owns a writer, over a fresh store per case:
//
//	blobtest.Run(t, func(t *testing.T) blobtest.Store { return myStore(t) })
//
// It asserts outcomes a caller relies on (blob.Copy, warm, weights): what
// is readable after each step, the errors' kinds (registry.ErrSizeMismatch,
// registry.ErrDigestMismatch, blob.ErrAlreadyExists), and that nothing that
// failed verification is ever readable.
package blobtest

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/kiln-build/kiln/layers/blob"
	"github.com/kiln-build/kiln/registry"
)

// Store is one blob store under test.
type Store interface {
	// Writer opens a resumable writer for blob dg of size bytes, or returns
	// blob.ErrAlreadyExists when the blob is committed. A second writer of
	// a blob being written waits for the first to Close, Commit or Abort.
	Writer(ctx context.Context, dg v1.Hash, size int64) (blob.Writer, error)
	// Read returns the committed blob's bytes, or an error when the store
	// does not hold it committed.
	Read(ctx context.Context, dg v1.Hash, size int64) ([]byte, error)
}

// Run runs every case, each over the store newStore returns.
func Run(t *testing.T, newStore func(t *testing.T) Store) {
	for _, c := range []struct {
		name string
		fn   func(*testing.T, Store)
	}{
		{"Writer", testWriter},
		{"EmptyBlob", testEmpty},
		{"CommitExists", testCommitExists},
		{"CommitExistsWhileWaiting", testCommitExistsWhileWaiting},
		{"ResumeAfterClose", testResumeAfterClose},
		{"ResumeInThreeParts", testResumeInThreeParts},
		{"ResumeDiscardedByAbort", testResumeDiscardedByAbort},
		{"CommitShort", testCommitShort},
		{"WriteLong", testWriteLong},
		{"CommitWrongDigest", testCommitWrongDigest},
		{"CommitTwice", testCommitTwice},
		{"AbortAfterCommit", testAbortAfterCommit},
		{"Abort", testAbort},
	} {
		t.Run(c.name, func(t *testing.T) { c.fn(t, newStore(t)) })
	}
}

// Blob returns n random bytes and their digest.
func Blob(t testing.TB, n int) ([]byte, v1.Hash) {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	h, _, err := v1.SHA256(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	return b, h
}

const size = 256<<10 + 17

func open(t *testing.T, s Store, dg v1.Hash, n int64) blob.Writer {
	t.Helper()
	w, err := s.Writer(context.Background(), dg, n)
	if err != nil {
		t.Fatalf("Writer: %v", err)
	}
	return w
}

func write(t *testing.T, w blob.Writer, p []byte) {
	t.Helper()
	if n, err := w.Write(p); err != nil || n != len(p) {
		t.Fatalf("Write(%d bytes) = %d, %v", len(p), n, err)
	}
}

// committed asserts the store holds exactly want under dg.
func committed(t *testing.T, s Store, dg v1.Hash, want []byte) {
	t.Helper()
	got, err := s.Read(context.Background(), dg, int64(len(want)))
	if err != nil {
		t.Fatalf("reading the committed blob: %v", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("the committed blob holds %d bytes that differ from the %d written", len(got), len(want))
	}
}

// absent asserts the store does not hold dg committed.
func absent(t *testing.T, s Store, dg v1.Hash, n int64) {
	t.Helper()
	if got, err := s.Read(context.Background(), dg, n); err == nil {
		t.Fatalf("blob %s is readable (%d bytes) though it was never committed", dg, len(got))
	}
}

func commit(t *testing.T, w blob.Writer) {
	t.Helper()
	if err := w.Commit(context.Background()); err != nil {
		t.Fatalf("Commit: %v", err)
	}
}

func testWriter(t *testing.T, s Store) {
	b, dg := Blob(t, size)
	w := open(t, s, dg, size)
	if w.Offset() != 0 {
		t.Fatalf("a new writer's Offset = %d, want 0", w.Offset())
	}
	write(t, w, b[:1000])
	write(t, w, b[1000:])
	if w.Offset() != size {
		t.Fatalf("Offset after writing the blob = %d, want %d", w.Offset(), size)
	}
	absent(t, s, dg, size)
	commit(t, w)
	committed(t, s, dg, b)
}

func testEmpty(t *testing.T, s Store) {
	b, dg := Blob(t, 0)
	w := open(t, s, dg, 0)
	commit(t, w)
	committed(t, s, dg, b)
}

func testCommitExists(t *testing.T, s Store) {
	b, dg := Blob(t, size)
	w := open(t, s, dg, size)
	write(t, w, b)
	commit(t, w)
	if w, err := s.Writer(context.Background(), dg, size); !errors.Is(err, blob.ErrAlreadyExists) {
		if err == nil {
			w.Abort(context.Background())
		}
		t.Fatalf("Writer of a committed blob: %v, want ErrAlreadyExists", err)
	}
	committed(t, s, dg, b)
}

// A writer that waited for another writer of the same blob learns, once
// that one committed, that the blob exists (containerd's ingest lock,
// blob.Dir's partial lock).
func testCommitExistsWhileWaiting(t *testing.T, s Store) {
	b, dg := Blob(t, size)
	w := open(t, s, dg, size)
	second := make(chan error, 1)
	go func() {
		w2, err := s.Writer(context.Background(), dg, size)
		if err == nil {
			w2.Abort(context.Background())
		}
		second <- err
	}()
	write(t, w, b)
	commit(t, w)
	if err := <-second; !errors.Is(err, blob.ErrAlreadyExists) {
		t.Fatalf("the waiting writer: %v, want ErrAlreadyExists", err)
	}
	committed(t, s, dg, b)
}

func testResumeAfterClose(t *testing.T, s Store) {
	b, dg := Blob(t, size)
	w := open(t, s, dg, size)
	write(t, w, b[:size/2])
	if err := w.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	absent(t, s, dg, size)
	w = open(t, s, dg, size)
	if w.Offset() != size/2 {
		t.Fatalf("resumed Offset = %d, want the %d bytes written", w.Offset(), size/2)
	}
	write(t, w, b[w.Offset():])
	commit(t, w)
	committed(t, s, dg, b)
}

func testResumeInThreeParts(t *testing.T, s Store) {
	b, dg := Blob(t, size)
	for _, end := range []int64{size / 3, 2 * size / 3} {
		w := open(t, s, dg, size)
		write(t, w, b[w.Offset():end])
		if err := w.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
	}
	w := open(t, s, dg, size)
	if w.Offset() != 2*size/3 {
		t.Fatalf("resumed Offset = %d, want %d", w.Offset(), 2*size/3)
	}
	write(t, w, b[w.Offset():])
	commit(t, w)
	committed(t, s, dg, b)
}

func testResumeDiscardedByAbort(t *testing.T, s Store) {
	b, dg := Blob(t, size)
	w := open(t, s, dg, size)
	write(t, w, b[:size/2])
	if err := w.Abort(context.Background()); err != nil {
		t.Fatalf("Abort: %v", err)
	}
	w = open(t, s, dg, size)
	if w.Offset() != 0 {
		t.Fatalf("Offset after Abort = %d, want 0", w.Offset())
	}
	write(t, w, b)
	commit(t, w)
	committed(t, s, dg, b)
}

// Fewer bytes than the descriptor names: ErrSizeMismatch, nothing
// committed, and the bytes stay for a later writer to finish.
func testCommitShort(t *testing.T, s Store) {
	b, dg := Blob(t, size)
	w := open(t, s, dg, size)
	write(t, w, b[:size-1])
	if err := w.Commit(context.Background()); !errors.Is(err, registry.ErrSizeMismatch) {
		t.Fatalf("Commit of %d of %d bytes: %v, want ErrSizeMismatch", size-1, size, err)
	}
	absent(t, s, dg, size)
	w = open(t, s, dg, size)
	if w.Offset() != size-1 {
		t.Fatalf("Offset after a short commit = %d, want %d", w.Offset(), size-1)
	}
	write(t, w, b[size-1:])
	commit(t, w)
	committed(t, s, dg, b)
}

// More bytes than the descriptor names are refused as they are written.
func testWriteLong(t *testing.T, s Store) {
	b, dg := Blob(t, size)
	w := open(t, s, dg, size)
	write(t, w, b)
	if _, err := w.Write([]byte{0}); !errors.Is(err, registry.ErrSizeMismatch) {
		t.Fatalf("writing byte %d of a %d-byte blob: %v, want ErrSizeMismatch", size+1, size, err)
	}
	commit(t, w)
	committed(t, s, dg, b)
}

// The right size, other bytes: ErrDigestMismatch, nothing committed, and
// after Abort the right bytes commit.
func testCommitWrongDigest(t *testing.T, s Store) {
	b, dg := Blob(t, size)
	bad := bytes.Clone(b)
	bad[size/2] ^= 1
	w := open(t, s, dg, size)
	write(t, w, bad)
	if err := w.Commit(context.Background()); !errors.Is(err, registry.ErrDigestMismatch) {
		t.Fatalf("Commit of other bytes: %v, want ErrDigestMismatch", err)
	}
	absent(t, s, dg, size)
	w = open(t, s, dg, size)
	if err := w.Abort(context.Background()); err != nil {
		t.Fatalf("Abort: %v", err)
	}
	absent(t, s, dg, size)
	w = open(t, s, dg, size)
	if w.Offset() != 0 {
		t.Fatalf("Offset after Abort = %d, want 0", w.Offset())
	}
	write(t, w, b)
	commit(t, w)
	committed(t, s, dg, b)
}

// A second Commit of one writer fails (the writer is done) and leaves the
// committed blob as it is.
func testCommitTwice(t *testing.T, s Store) {
	b, dg := Blob(t, size)
	w := open(t, s, dg, size)
	write(t, w, b)
	commit(t, w)
	if err := w.Commit(context.Background()); err == nil {
		t.Fatal("a second Commit succeeded")
	}
	committed(t, s, dg, b)
}

// Abort after Commit discards nothing: the blob is committed.
func testAbortAfterCommit(t *testing.T, s Store) {
	b, dg := Blob(t, size)
	w := open(t, s, dg, size)
	write(t, w, b)
	commit(t, w)
	_ = w.Abort(context.Background())
	committed(t, s, dg, b)
}

func testAbort(t *testing.T, s Store) {
	b, dg := Blob(t, size)
	w := open(t, s, dg, size)
	write(t, w, b)
	if err := w.Abort(context.Background()); err != nil {
		t.Fatalf("Abort: %v", err)
	}
	absent(t, s, dg, size)
	w = open(t, s, dg, size)
	if w.Offset() != 0 {
		t.Fatalf("Offset after Abort = %d, want 0", w.Offset())
	}
	if err := w.Abort(context.Background()); err != nil {
		t.Fatalf("Abort of an empty writer: %v", err)
	}
}
