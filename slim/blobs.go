package slim

import (
	"context"
	"crypto/sha256"
	"io"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"

	"github.com/kiln-build/kiln/layers"
)

// GzipLevel is the deflate level of gzip blobs: the level docker push and
// BuildKit use, fixed, so that the same tar always gives the same blob.
const GzipLevel = 6

// blobSink writes one encoding of a layer: a layers.Scratch, and the
// compression it holds.
type blobSink struct {
	comp layers.Compression
	*layers.Scratch
}

func newSink(dir string, c layers.Compression) (*blobSink, error) {
	sc, err := layers.NewScratch(dir)
	if err != nil {
		return nil, err
	}
	return &blobSink{comp: c, Scratch: sc}, nil
}

// commit names the blob after its digest in the scratch directory.
func (s *blobSink) commit() (blob, error) {
	dg, n, p, err := s.Commit()
	if err != nil {
		return blob{}, err
	}
	return blob{comp: s.comp, digest: dg, size: n, path: p}, nil
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
				s.Abort()
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
	_, err = io.Copy(io.MultiWriter(zw, pw), layers.ContextReader(ctx, r, nil))
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
		b, err := s.commit()
		if err != nil {
			return err
		}
		bl.blobs = append(bl.blobs, b)
	}
	return nil
}
