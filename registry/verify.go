package registry

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"io"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/kiln-build/kiln/internal/bufpipe"
)

// ErrDigestMismatch is returned (wrapped) when a blob's bytes do not hash to
// the digest that names them.
var ErrDigestMismatch = errors.New("digest mismatch")

// ErrSizeMismatch is returned (wrapped) when a blob is shorter or longer than
// its descriptor says.
var ErrSizeMismatch = errors.New("size mismatch")

// VerifyReader hashes everything read through it and, at EOF, fails the read
// if the bytes do not match want (and size, when size >= 0). A reader that is
// abandoned before EOF verifies nothing; callers that skip must Drain.
type VerifyReader struct {
	r    io.Reader
	h    summer
	bg   *bufpipe.Hash
	want v1.Hash
	size int64
	n    int64
	done bool
	err  error
}

// summer is the write side of a hash: hash.Hash, or bufpipe.Hash.
type summer interface {
	Write([]byte) (int, error)
	Sum([]byte) []byte
}

// VerifyOption tunes a VerifyReader.
type VerifyOption func(*VerifyReader)

// HashInBackground hashes in a goroutine of its own (bufpipe.Hash), for
// a reader whose consumer holds a core (a decoder): the digest then costs
// the reader a copy, not the hash. The caller must Close the reader.
func HashInBackground() VerifyOption {
	return func(v *VerifyReader) {
		v.bg = bufpipe.NewHash(sha256.New(), bufpipe.HashBufferSize, bufpipe.HashQueueLen)
		v.h = v.bg
	}
}

// NewVerifyReader returns a reader that checks r against want and size.
// Size < 0 means unknown.
func NewVerifyReader(r io.Reader, want v1.Hash, size int64, opts ...VerifyOption) (*VerifyReader, error) {
	if want.Algorithm != "sha256" {
		return nil, fmt.Errorf("verifying %s: unsupported digest algorithm %q", want, want.Algorithm)
	}
	v := &VerifyReader{r: r, h: sha256.New(), want: want, size: size}
	for _, o := range opts {
		o(v)
	}
	return v, nil
}

// Close releases a background hash's goroutine (HashInBackground); it
// does not close r.
func (v *VerifyReader) Close() error {
	if v.bg != nil {
		v.bg.Close()
	}
	return nil
}

// Read implements io.Reader.
func (v *VerifyReader) Read(p []byte) (int, error) {
	if v.err != nil {
		return 0, v.err
	}
	n, err := v.r.Read(p)
	v.h.Write(p[:n])
	v.n += int64(n)
	if v.size >= 0 && v.n > v.size {
		v.err = fmt.Errorf("blob %s: %w: more than the %d bytes its descriptor names", v.want, ErrSizeMismatch, v.size)
		return n, v.err
	}
	if err == io.EOF {
		v.done = true
		if v.size >= 0 && v.n != v.size {
			v.err = fmt.Errorf("blob %s: %w: got %d bytes, descriptor says %d (truncated?)", v.want, ErrSizeMismatch, v.n, v.size)
			return n, v.err
		}
		got := v1.Hash{Algorithm: "sha256", Hex: fmt.Sprintf("%x", v.h.Sum(nil))}
		if got != v.want {
			v.err = fmt.Errorf("blob %s: %w: content hashes to %s", v.want, ErrDigestMismatch, got)
			return n, v.err
		}
	}
	return n, err
}

// Drain reads the rest of the stream so the digest is checked, and returns
// the verification error if any.
func (v *VerifyReader) Drain() error {
	if v.done && v.err == nil {
		return nil
	}
	_, err := io.Copy(io.Discard, v)
	return err
}

// BytesRead is how many bytes passed through so far.
func (v *VerifyReader) BytesRead() int64 { return v.n }

// IsIntegrityError says whether err is a blob that is not what its
// descriptor names (ErrDigestMismatch or ErrSizeMismatch).
func IsIntegrityError(err error) bool {
	return errors.Is(err, ErrDigestMismatch) || errors.Is(err, ErrSizeMismatch)
}
