package layers

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"hash"
	"os"
	"path/filepath"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// Scratch is a blob kiln makes itself (a rewritten or recompressed layer),
// whose digest is not known until its last byte: it is written to a
// temporary file in a directory of the writer's own, hashed as it passes,
// and Commit names it after its digest. It is blob.Dir's opposite case:
// Dir ingests bytes of a known digest and verifies them; a Scratch computes
// the digest, so there is nothing to verify, and nothing to resume (the
// bytes come from kiln, not from a network), and no lock (the directory is
// the writer's). slim's and convert's new layers, eStargz blobs and
// weights' diverted files and packed layers are all written through one.
// It lives here rather than in layers/blob, which builds on this package,
// so that WriteEStargz can use it too.
type Scratch struct {
	dir string
	f   *os.File
	bw  *bufio.Writer
	h   hash.Hash
	n   int64
}

// NewScratch starts a blob in dir, which must be private to the caller
// (Commit renames by digest inside it).
func NewScratch(dir string) (*Scratch, error) {
	f, err := os.CreateTemp(dir, ".scratch-*.tmp")
	if err != nil {
		return nil, err
	}
	return &Scratch{dir: dir, f: f, bw: bufio.NewWriterSize(f, 1<<20), h: sha256.New()}, nil
}

// Write appends to the blob and to its digest.
func (s *Scratch) Write(p []byte) (int, error) {
	n, err := s.bw.Write(p)
	s.h.Write(p[:n])
	s.n += int64(n)
	return n, err
}

// Commit flushes and closes the file and renames it to dir/<hex of its
// sha256>, returning the digest, the size and that path. A blob of the
// same digest already there (two layers that came out the same) is
// replaced by the same bytes, which is harmless. On error the file is
// removed.
func (s *Scratch) Commit() (digest v1.Hash, size int64, path string, err error) {
	err = s.bw.Flush()
	if cerr := s.f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		digest = v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(s.h.Sum(nil))}
		path = filepath.Join(s.dir, digest.Hex)
		err = os.Rename(s.f.Name(), path)
	}
	if err != nil {
		os.Remove(s.f.Name())
		return v1.Hash{}, 0, "", err
	}
	return digest, s.n, path, nil
}

// Abort discards the blob. It is safe after Commit, which it leaves alone.
func (s *Scratch) Abort() {
	if s.f.Close() == nil {
		os.Remove(s.f.Name())
	}
}
