package layers

import (
	"fmt"
	"io"
	"os"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// OpenDecompressed opens a local layer blob and decodes it as it streams
// (gzip, zstd, eStargz's many gzip members, or none: Decompress); Close
// releases the decoder and the file.
func OpenDecompressed(path string) (io.ReadCloser, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	r, _, closeDec, err := Decompress(f)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &decodedFile{Reader: r, closeDec: closeDec, f: f}, nil
}

type decodedFile struct {
	io.Reader
	closeDec func()
	f        *os.File
}

func (d *decodedFile) Close() error {
	d.closeDec()
	return d.f.Close()
}

// FileLayer is a layer whose blob kiln wrote to a local file (slim's and
// convert's scratch blobs): digest, diff ID and sizes known, the bytes
// read from the file when a writer asks, never held in memory.
type FileLayer struct {
	path           string
	digest, diffID v1.Hash
	size, usize    int64
	media          types.MediaType
}

var _ v1.Layer = (*FileLayer)(nil)

// NewFileLayer describes the blob at path: size bytes hashing to digest,
// whose tar (usize bytes, < 0 unknown) hashes to diffID.
func NewFileLayer(path string, digest, diffID v1.Hash, size, usize int64, media types.MediaType) *FileLayer {
	return &FileLayer{path: path, digest: digest, diffID: diffID, size: size, usize: usize, media: media}
}

func (l *FileLayer) Digest() (v1.Hash, error)             { return l.digest, nil }
func (l *FileLayer) DiffID() (v1.Hash, error)             { return l.diffID, nil }
func (l *FileLayer) Size() (int64, error)                 { return l.size, nil }
func (l *FileLayer) MediaType() (types.MediaType, error)  { return l.media, nil }
func (l *FileLayer) Compressed() (io.ReadCloser, error)   { return os.Open(l.path) }
func (l *FileLayer) Uncompressed() (io.ReadCloser, error) { return OpenDecompressed(l.path) }

// UncompressedSize lets writers that need the tar's size first (a docker
// archive's entries) skip decoding the layer to count it; an unknown size
// is counted once by decoding.
func (l *FileLayer) UncompressedSize() (int64, error) {
	if l.usize >= 0 {
		return l.usize, nil
	}
	rc, err := l.Uncompressed()
	if err != nil {
		return 0, err
	}
	defer rc.Close()
	n, err := io.Copy(io.Discard, rc)
	if err != nil {
		return 0, fmt.Errorf("layer %s: %w", l.digest, err)
	}
	l.usize = n
	return n, nil
}
