package slim

import (
	"bufio"
	"context"
	"crypto/sha256"
	"hash"
	"io"
	"os"
	"path/filepath"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"

	"github.com/kiln-build/kiln/layers"
)

// GzipLevel is the deflate level of gzip blobs: the level docker push and
// BuildKit use, fixed, so that the same tar always gives the same blob.
const GzipLevel = 6

// blobSink writes one encoding of a layer to a temporary file, hashing what
// it writes.
type blobSink struct {
	comp layers.Compression
	f    *os.File
	bw   *bufio.Writer
	h    hash.Hash
	n    int64
}

func newSink(dir string, c layers.Compression) (*blobSink, error) {
	f, err := os.CreateTemp(dir, ".blob-*.tmp")
	if err != nil {
		return nil, err
	}
	return &blobSink{comp: c, f: f, bw: bufio.NewWriterSize(f, 1<<20), h: sha256.New()}, nil
}

func (s *blobSink) Write(p []byte) (int, error) {
	n, err := s.bw.Write(p)
	s.h.Write(p[:n])
	s.n += int64(n)
	return n, err
}

// commit flushes, closes and renames the file to its digest.
func (s *blobSink) commit(dir string) (blob, error) {
	err := s.bw.Flush()
	if cerr := s.f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return blob{}, err
	}
	b := blob{comp: s.comp, digest: layersHash(hexHash(s.h)), size: s.n}
	b.path = filepath.Join(dir, b.digest.Hex)
	return b, os.Rename(s.f.Name(), b.path)
}

func (s *blobSink) abort() {
	s.f.Close()
	os.Remove(s.f.Name())
}

// writeBlobs turns one output layer's zstd stream (the concatenated
// segments and the end-of-archive frame) into its blobs, in one pass: the
// stream is stored as it is for zstd, and decoded once, which gives the
// diff ID, proves the stream decodes, and feeds the gzip encoder when gzip
// is wanted. The gzip stream is a single member with an empty header (no
// name, no time) at GzipLevel, one encoder goroutine: its bytes depend
// only on the tar. Blobs are written to temporary files and renamed to
// their digests.
func writeBlobs(ctx context.Context, dir string, r io.Reader, bl *blobLayer, comps []layers.Compression) (err error) {
	var zs, gs *blobSink
	defer func() {
		for _, s := range []*blobSink{zs, gs} {
			if s != nil && err != nil {
				s.abort()
			}
		}
	}()
	for _, c := range comps {
		s, err := newSink(dir, c)
		if err != nil {
			return err
		}
		if c == layers.Zstd {
			zs = s
		} else {
			gs = s
		}
	}
	pr, pw := io.Pipe()
	type res struct {
		sum string
		n   int64
		err error
	}
	done := make(chan res, 1)
	go func() {
		fail := func(err error) {
			pr.CloseWithError(err)
			done <- res{err: err}
		}
		zr, err := zstd.NewReader(pr, zstd.WithDecoderConcurrency(1))
		if err != nil {
			fail(err)
			return
		}
		defer zr.Close()
		h := sha256.New()
		var sink io.Writer = h
		var gw *gzip.Writer
		if gs != nil {
			if gw, err = gzip.NewWriterLevel(gs, GzipLevel); err != nil {
				fail(err)
				return
			}
			sink = io.MultiWriter(h, gw)
		}
		n, err := io.Copy(sink, zr)
		if err == nil && gw != nil {
			err = gw.Close()
		}
		pr.CloseWithError(err)
		done <- res{sum: hexHash(h), n: n, err: err}
	}()
	var zw io.Writer = io.Discard
	if zs != nil {
		zw = zs
	}
	_, err = io.Copy(io.MultiWriter(zw, pw), &ctxReader{ctx: ctx, r: r})
	pw.CloseWithError(err)
	d := <-done
	if err == nil {
		err = d.err
	}
	if err != nil {
		return err
	}
	bl.usize = d.n
	bl.diffID = layersHash(d.sum)
	for _, c := range comps {
		s := zs
		if c == layers.Gzip {
			s = gs
		}
		b, err := s.commit(dir)
		if err != nil {
			return err
		}
		bl.blobs = append(bl.blobs, b)
	}
	return nil
}
