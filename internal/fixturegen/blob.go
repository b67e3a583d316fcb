package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
)

// Compression of a layer blob.
type Compression string

const (
	Gzip Compression = "gzip"
	Zstd Compression = "zstd"
)

func (c Compression) mediaType() types.MediaType {
	if c == Zstd {
		return types.OCILayerZStd
	}
	return types.OCILayer
}

// blobFormat is bumped whenever the tar or compression output changes, so
// cached blobs from an older generator are not reused.
const blobFormat = "fixturegen-blob-v2"

// BlobMeta is what the blob cache remembers about one compressed layer.
type BlobMeta struct {
	Digest           string      `json:"digest"`
	DiffID           string      `json:"diff_id"`
	Size             int64       `json:"size"`
	UncompressedSize int64       `json:"uncompressed_size"`
	MediaType        string      `json:"media_type"`
	Stats            *LayerStats `json:"stats"`
}

// buildBlob tars dir (streaming), compresses it and stores the result as
// cacheDir/sha256/<hex>, hashing the uncompressed (diff ID) and compressed
// (digest) streams in the same single pass. Results are cached under key.
// errPruned: the blob is not cached and its layer's directory was pruned
// (scripts/fixtures.sh prune_rootfs); the script rebuilds the layers.
var errPruned = errors.New("layer directory pruned and its blob not cached: rebuild the layers (scripts/fixtures.sh does, on exit code 3)")

func buildBlob(dir string, lowers []string, key string, comp Compression, cacheDir string, epoch time.Time) (*BlobMeta, error) {
	metaPath := filepath.Join(cacheDir, "meta", key+"-"+string(comp)+".json")
	if b, err := os.ReadFile(metaPath); err == nil {
		var m BlobMeta
		if json.Unmarshal(b, &m) == nil && m.Stats != nil {
			if h, err := v1.NewHash(m.Digest); err == nil {
				if fi, err := os.Stat(filepath.Join(cacheDir, "sha256", h.Hex)); err == nil && fi.Size() == m.Size {
					return &m, nil
				}
			}
		}
	}
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		if _, perr := os.Stat(filepath.Join(filepath.Dir(dir), "pruned")); perr == nil {
			return nil, errPruned
		}
	}
	for _, d := range []string{"meta", "sha256"} {
		if err := os.MkdirAll(filepath.Join(cacheDir, d), 0o755); err != nil {
			return nil, err
		}
	}
	tmp, err := os.CreateTemp(filepath.Join(cacheDir, "sha256"), ".tmp-")
	if err != nil {
		return nil, err
	}
	defer os.Remove(tmp.Name()) // no-op after the rename
	defer tmp.Close()

	digestH := sha256.New()
	compressedOut := &countWriter{w: io.MultiWriter(tmp, digestH)}
	var cw io.WriteCloser
	switch comp {
	case Zstd:
		cw, err = zstd.NewWriter(compressedOut, zstd.WithEncoderConcurrency(1), zstd.WithEncoderLevel(zstd.SpeedDefault))
	default:
		cw, err = gzip.NewWriterLevel(compressedOut, gzip.DefaultCompression)
	}
	if err != nil {
		return nil, err
	}
	diffH := sha256.New()
	raw := &countWriter{w: io.MultiWriter(cw, diffH)}
	stats := NewLayerStats()
	if err := WriteTar(raw, dir, TarOptions{ModTime: epoch, OnEntry: stats.Add, LowerDirs: lowers}); err != nil {
		return nil, err
	}
	if err := cw.Close(); err != nil {
		return nil, err
	}
	if err := tmp.Close(); err != nil {
		return nil, err
	}
	m := &BlobMeta{
		Digest:           "sha256:" + hex.EncodeToString(digestH.Sum(nil)),
		DiffID:           "sha256:" + hex.EncodeToString(diffH.Sum(nil)),
		Size:             compressedOut.n,
		UncompressedSize: raw.n,
		MediaType:        string(comp.mediaType()),
		Stats:            stats,
	}
	h, _ := v1.NewHash(m.Digest)
	if err := os.Rename(tmp.Name(), filepath.Join(cacheDir, "sha256", h.Hex)); err != nil {
		return nil, err
	}
	b, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(metaPath+".tmp", b, 0o644); err != nil {
		return nil, err
	}
	return m, os.Rename(metaPath+".tmp", metaPath)
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// blobLayer is a v1.Layer backed by a compressed blob file whose hashes are
// already known, so nothing is recompressed or rehashed when the layer is
// written to a layout, a tarball or a registry.
type blobLayer struct {
	path   string
	meta   BlobMeta
	digest v1.Hash
	diffID v1.Hash
}

func newBlobLayer(cacheDir string, m *BlobMeta) (*blobLayer, error) {
	d, err := v1.NewHash(m.Digest)
	if err != nil {
		return nil, err
	}
	di, err := v1.NewHash(m.DiffID)
	if err != nil {
		return nil, err
	}
	return &blobLayer{path: filepath.Join(cacheDir, "sha256", d.Hex), meta: *m, digest: d, diffID: di}, nil
}

func (l *blobLayer) Digest() (v1.Hash, error) { return l.digest, nil }
func (l *blobLayer) DiffID() (v1.Hash, error) { return l.diffID, nil }
func (l *blobLayer) Size() (int64, error)     { return l.meta.Size, nil }
func (l *blobLayer) MediaType() (types.MediaType, error) {
	return types.MediaType(l.meta.MediaType), nil
}
func (l *blobLayer) Compressed() (io.ReadCloser, error) { return os.Open(l.path) }
func (l *blobLayer) Uncompressed() (io.ReadCloser, error) {
	return decompress(l.path, l.meta.MediaType)
}

func decompress(p, mt string) (io.ReadCloser, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	switch types.MediaType(mt) {
	case types.OCILayerZStd:
		d, err := zstd.NewReader(f)
		if err != nil {
			f.Close()
			return nil, err
		}
		return &closers{Reader: d, close: func() error { d.Close(); return f.Close() }}, nil
	case types.OCILayer, types.DockerLayer:
		g, err := gzip.NewReader(f)
		if err != nil {
			f.Close()
			return nil, err
		}
		return &closers{Reader: g, close: func() error { return errors.Join(g.Close(), f.Close()) }}, nil
	}
	f.Close()
	return nil, fmt.Errorf("unknown layer media type %s", mt)
}

type closers struct {
	io.Reader
	close func() error
}

func (c *closers) Close() error { return c.close() }

// uncompressedLayer presents a blobLayer as an uncompressed layer (digest ==
// diff ID), which is what `docker save` archives contain.
type uncompressedLayer struct{ *blobLayer }

func (l uncompressedLayer) Digest() (v1.Hash, error) { return l.diffID, nil }
func (l uncompressedLayer) Size() (int64, error)     { return l.meta.UncompressedSize, nil }
func (l uncompressedLayer) MediaType() (types.MediaType, error) {
	return types.DockerUncompressedLayer, nil
}
func (l uncompressedLayer) Compressed() (io.ReadCloser, error) { return l.Uncompressed() }
