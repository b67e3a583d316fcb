package layers

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"sync/atomic"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/kiln-build/kiln/internal/bufpipe"
	"github.com/kiln-build/kiln/registry"
)

// WalkOptions tunes Layer.Walk.
type WalkOptions struct {
	// SkipVerify trusts local blobs without hashing them. Registry blobs
	// are always verified (digest and size, against their descriptor).
	SkipVerify bool
	// Progress, when set, is advanced by the number of stored (compressed)
	// bytes consumed, for progress displays.
	Progress *atomic.Int64
	// DiffIDChecked says this run already walked the same verified blob
	// and checked its uncompressed content against the same diff ID (slim's
	// rewrite after its scan): the uncompressed stream is not hashed again.
	// The blob's own digest is still checked.
	DiffIDChecked bool
}

// LayerStats describes what a walk read.
type LayerStats struct {
	Compression Compression
	// UncompressedSize is the length of the layer's tar stream.
	UncompressedSize int64
	// Verified is true when the blob's digest was checked and, where the
	// config names one, its uncompressed content hashed to its diff ID.
	Verified bool
}

// Walk streams the layer's tar entries through fn: the blob is read once,
// decompressed on the fly and verified against its digest at the end (a
// mismatch fails the walk even if fn saw every entry). For uncompressed
// local blobs fn's unread contents are skipped by seeking, and the digest is
// checked by a second sequential reader running alongside.
func (l *Layer) Walk(ctx context.Context, opt WalkOptions, fn WalkFunc) (LayerStats, error) {
	if err := CheckTar(l.MediaType); err != nil {
		return LayerStats{}, fmt.Errorf("layer %d (%s) %w", l.Index, l.name(), err)
	}
	st, err := l.walk(ctx, opt, fn)
	if err != nil {
		return st, fmt.Errorf("layer %d (%s): %w", l.Index, l.name(), err)
	}
	return st, nil
}

func (l *Layer) name() string {
	if l.Digest.Hex != "" {
		return l.Digest.String()
	}
	return l.DiffID.String()
}

func (l *Layer) walk(ctx context.Context, opt WalkOptions, fn WalkFunc) (LayerStats, error) {
	var st LayerStats
	if l.file != nil {
		head := make([]byte, 4)
		n, err := l.file.ReadAt(head, l.off)
		if err != nil && err != io.EOF {
			return st, err
		}
		st.Compression = DetectCompression(head[:n])
		if err := CheckCompression(l.MediaType, st.Compression); err != nil {
			return st, err
		}
		if st.Compression == Uncompressed {
			return l.walkSeekable(ctx, opt, fn)
		}
	}
	var rc io.ReadCloser
	var err error
	if l.file != nil {
		rc = io.NopCloser(io.NewSectionReader(l.file, l.off, l.Size))
	} else {
		rc, err = l.open(ctx)
		if err != nil {
			return st, err
		}
	}
	defer rc.Close()
	var raw io.Reader = &ctxReader{ctx: ctx, r: rc, progress: opt.Progress}
	var vr *registry.VerifyReader
	if !l.verifyDiffID && (l.remote || !opt.SkipVerify) {
		vr, err = registry.NewVerifyReader(raw, l.Digest, l.Size, registry.HashInBackground())
		if err != nil {
			return st, err
		}
		defer vr.Close()
		raw = vr
	}
	dr, c, closeDec, err := Decompress(raw)
	if err != nil {
		return st, err
	}
	defer closeDec()
	st.Compression = c
	if err := CheckCompression(l.MediaType, c); err != nil {
		return st, err
	}
	cr := &CountingReader{R: dr}
	var tarIn io.Reader = cr
	var dv *diffIDReader
	if l.DiffID.Hex != "" && !opt.SkipVerify && (l.verifyDiffID || !opt.DiffIDChecked) {
		// The config's claim about the layer (D12): what the blob holds,
		// decompressed, is what rootfs.diff_ids names, or the walk fails.
		dv, err = newDiffIDReader(cr, l)
		if err != nil {
			return st, err
		}
		defer dv.Close()
		tarIn = dv
	}
	if err := WalkTar(ctx, tarIn, fn); err != nil {
		return st, err
	}
	// Read what follows the tar's end marker: padding counts toward the
	// size, and the digest can only be checked at EOF.
	if _, err := io.Copy(io.Discard, tarIn); err != nil {
		return st, err
	}
	if _, err := io.Copy(io.Discard, raw); err != nil {
		return st, err
	}
	st.UncompressedSize = cr.N
	st.Verified = vr != nil || dv != nil
	return st, nil
}

// walkSeekable walks an uncompressed local blob, seeking past contents, while
// a second reader hashes the blob sequentially.
func (l *Layer) walkSeekable(ctx context.Context, opt WalkOptions, fn WalkFunc) (LayerStats, error) {
	st := LayerStats{Compression: Uncompressed, UncompressedSize: l.Size}
	want := l.Digest
	if l.verifyDiffID || want.Hex == "" {
		want = l.DiffID
	}
	// An uncompressed blob is its own tar: its digest is its diff ID, and
	// a config that names another one does not describe it (D12).
	if !opt.SkipVerify && l.DiffID.Hex != "" && want != l.DiffID {
		return st, fmt.Errorf("%w: the blob is an uncompressed tar, so its diff ID is its digest %s, but the config's rootfs.diff_ids[%d] says %s", registry.ErrDigestMismatch, want, l.Index, l.DiffID)
	}
	var hashErr chan error
	hctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if !opt.SkipVerify {
		hashErr = make(chan error, 1)
		go func() {
			hashErr <- hashSection(hctx, io.NewSectionReader(l.file, l.off, l.Size), want, l.Size, opt.Progress)
		}()
	}
	sr := io.NewSectionReader(l.file, l.off, l.Size)
	walkErr := WalkTar(ctx, &ctxSeeker{ctx: ctx, SectionReader: sr}, fn)
	if walkErr != nil {
		cancel()
		if hashErr != nil {
			<-hashErr
		}
		return st, walkErr
	}
	if hashErr != nil {
		if err := <-hashErr; err != nil {
			return st, err
		}
		st.Verified = true
	} else if opt.Progress != nil {
		opt.Progress.Add(l.Size)
	}
	return st, nil
}

func hashSection(ctx context.Context, r io.Reader, want v1.Hash, size int64, progress *atomic.Int64) error {
	if want.Algorithm != "sha256" {
		return fmt.Errorf("unsupported digest algorithm %q", want.Algorithm)
	}
	h := sha256.New()
	n, err := io.CopyBuffer(h, &ctxReader{ctx: ctx, r: r, progress: progress}, make([]byte, 1<<20))
	if err != nil {
		return err
	}
	if n != size {
		return fmt.Errorf("%w: read %d bytes, expected %d", registry.ErrSizeMismatch, n, size)
	}
	got := v1.Hash{Algorithm: "sha256", Hex: fmt.Sprintf("%x", h.Sum(nil))}
	if got != want {
		return fmt.Errorf("blob %s: %w: content hashes to %s", want, registry.ErrDigestMismatch, got)
	}
	return nil
}

// ContextReader returns r that stops with the context's cause once ctx
// ends and, when progress is non-nil, adds every byte read to it: the one
// cancellable reader of every stream kiln copies (layers, slim, convert).
func ContextReader(ctx context.Context, r io.Reader, progress *atomic.Int64) io.Reader {
	return &ctxReader{ctx: ctx, r: r, progress: progress}
}

// ctxReader is ContextReader's reader.
type ctxReader struct {
	ctx      context.Context
	r        io.Reader
	progress *atomic.Int64
}

func (c *ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, context.Cause(c.ctx)
	}
	n, err := c.r.Read(p)
	if c.progress != nil && n > 0 {
		c.progress.Add(int64(n))
	}
	return n, err
}

type ctxSeeker struct {
	ctx context.Context
	*io.SectionReader
}

func (c *ctxSeeker) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, context.Cause(c.ctx)
	}
	return c.SectionReader.Read(p)
}

// CountingReader counts the bytes read through it in N and, when
// Progress is set, adds them to it as they pass.
type CountingReader struct {
	R        io.Reader
	N        int64
	Progress interface{ Add(int64) int64 }
}

func (c *CountingReader) Read(p []byte) (int, error) {
	n, err := c.R.Read(p)
	c.N += int64(n)
	if c.Progress != nil && n > 0 {
		c.Progress.Add(int64(n))
	}
	return n, err
}

// diffIDReader hashes a layer's uncompressed tar stream and, at its end,
// compares the hash with the diff ID the image's config names for it.
// The hash runs in a goroutine of its own (bufpipe.Hash): on a gzip
// layer the decoder holds one core, and the diff ID's hash (about a
// tenth of analyze's CPU) would otherwise add to it. Close releases the
// goroutine of a walk that stops before the end.
type diffIDReader struct {
	r   io.Reader
	h   *bufpipe.Hash
	l   *Layer
	err error
}

func newDiffIDReader(r io.Reader, l *Layer) (*diffIDReader, error) {
	if l.DiffID.Algorithm != "sha256" {
		return nil, fmt.Errorf("diff ID %s: unsupported digest algorithm %q", l.DiffID, l.DiffID.Algorithm)
	}
	return &diffIDReader{r: r, h: bufpipe.NewHash(sha256.New(), bufpipe.HashBufferSize, bufpipe.HashQueueLen), l: l}, nil
}

// Close releases the hash's goroutine.
func (d *diffIDReader) Close() { d.h.Close() }

func (d *diffIDReader) Read(p []byte) (int, error) {
	if d.err != nil {
		return 0, d.err
	}
	n, err := d.r.Read(p)
	d.h.Write(p[:n])
	if err == io.EOF {
		got := v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(d.h.Sum(nil))}
		if got != d.l.DiffID {
			d.err = &DiffIDError{Index: d.l.Index, Got: got, Want: d.l.DiffID}
			return n, d.err
		}
	}
	return n, err
}

// DiffIDError says a layer's uncompressed content is not what the
// image's config names in rootfs.diff_ids: the manifest and the config
// describe two different images (a tampered or broken image).
type DiffIDError struct {
	Index     int
	Got, Want v1.Hash
}

func (e *DiffIDError) Error() string {
	return fmt.Sprintf("uncompressed content hashes to %s, but the config's rootfs.diff_ids[%d] says %s: the manifest's layers are not the image its config describes", e.Got, e.Index, e.Want)
}

// Unwrap makes a DiffIDError an ErrDigestMismatch.
func (e *DiffIDError) Unwrap() error { return registry.ErrDigestMismatch }
