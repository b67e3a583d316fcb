package convert

import (
	"context"
	"crypto/sha256"
	"fmt"
	"hash"
	"io"
	"os"
	"runtime"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/kiln-build/kiln/internal/scratch"
	"github.com/kiln-build/kiln/layers"
	"github.com/kiln-build/kiln/layers/erofs"
	"github.com/kiln-build/kiln/registry"
	"github.com/klauspost/compress/zstd"
	"golang.org/x/sync/errgroup"
)

// Options tune a conversion.
type Options struct {
	// Level is the zstd level (1-22, default 3: the level Docker and
	// BuildKit use).
	Level int
	// Jobs is how many layers convert at once (default: CPUs).
	Jobs int
	// TempDir holds the converted blobs until they are written (default
	// os.TempDir()), in a directory of each Result's own.
	TempDir string
	// Progress, when set, counts source bytes read.
	Progress interface{ Add(int64) int64 }
}

// LayerReport is one layer's outcome.
type LayerReport struct {
	Index        int     `json:"index"`
	From         string  `json:"from"`
	To           string  `json:"to"`
	FromMedia    string  `json:"from_media_type"`
	FromSize     int64   `json:"from_size"`
	ToSize       int64   `json:"to_size"`
	Uncompressed int64   `json:"uncompressed_size"`
	Ratio        float64 `json:"ratio"` // to_size / from_size
	// FromDecode and ToDecode are seconds to decompress the source blob
	// (during conversion, source reads included) and the zstd blob (a
	// separate pass over the scratch file).
	FromDecode float64 `json:"from_decode_seconds"`
	ToDecode   float64 `json:"to_decode_seconds"`
	Skipped    bool    `json:"skipped,omitempty"` // already zstd
	// StartupFiles is how many startup files an eStargz layer places
	// first (ToEStargz).
	StartupFiles int `json:"startup_files,omitempty"`
}

// Result is a converted image: Image streams its layers from scratch blobs
// in a directory of the Result's own (blobs are named by digest there, so
// no other run's can be taken for them), which Close removes.
type Result struct {
	Image  v1.Image
	Layers []LayerReport
	dir    string
}

func newResult(o Options, n int) (*Result, error) {
	dir, err := scratch.Dir(o.TempDir, "kiln-convert")
	if err != nil {
		return nil, err
	}
	return &Result{Layers: make([]LayerReport, n), dir: dir}, nil
}

// Close removes the scratch blobs.
func (r *Result) Close() error { return os.RemoveAll(r.dir) }

// ToZstd recompresses src's layers with zstd.
func ToZstd(ctx context.Context, src v1.Image, o Options) (*Result, error) {
	if o.Level == 0 {
		o.Level = 3
	}
	if o.Level < 1 || o.Level > 22 {
		return nil, fmt.Errorf("zstd level %d: want 1-22", o.Level)
	}
	cfg, res, out, err := convertLayers(ctx, src, o, func(ctx context.Context, l v1.Layer, diffID v1.Hash, dir string) (v1.Layer, LayerReport, error) {
		return convertLayer(ctx, l, diffID, dir, o)
	})
	if err != nil {
		return nil, err
	}
	adds := make([]mutate.Addendum, len(out))
	for i, l := range out {
		adds[i] = mutate.Addendum{Layer: l, MediaType: types.OCILayerZStd}
	}
	// The source config as is: history and diff IDs are unchanged, since
	// the uncompressed tars are the same bytes.
	return res.finish(adds, cfg.DeepCopy())
}

// convertLayers converts src's layers with conv, o.Jobs of them at once
// (default: CPUs), into scratch blobs in a new Result's directory, each
// layer's report in its Layers (Index set). It returns src's config (not a
// copy), the Result (no Image yet) and the converted layers in order; on
// an error the scratch blobs are removed.
func convertLayers(ctx context.Context, src v1.Image, o Options, conv func(ctx context.Context, l v1.Layer, diffID v1.Hash, dir string) (v1.Layer, LayerReport, error)) (*v1.ConfigFile, *Result, []v1.Layer, error) {
	if o.Jobs <= 0 {
		o.Jobs = runtime.NumCPU()
	}
	cfg, err := src.ConfigFile()
	if err != nil {
		return nil, nil, nil, fmt.Errorf("config: %v", err)
	}
	ls, err := src.Layers()
	if err != nil {
		return nil, nil, nil, fmt.Errorf("layers: %v", err)
	}
	if len(ls) != len(cfg.RootFS.DiffIDs) {
		return nil, nil, nil, fmt.Errorf("config: rootfs.diff_ids has %d entries for %d layers", len(cfg.RootFS.DiffIDs), len(ls))
	}
	res, err := newResult(o, len(ls))
	if err != nil {
		return nil, nil, nil, err
	}
	out := make([]v1.Layer, len(ls))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(o.Jobs)
	for i, l := range ls {
		g.Go(func() error {
			nl, rep, err := conv(gctx, l, cfg.RootFS.DiffIDs[i], res.dir)
			if err != nil {
				return fmt.Errorf("layer %d: %w", i, err)
			}
			rep.Index = i
			out[i], res.Layers[i] = nl, rep
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		res.Close()
		return nil, nil, nil, err
	}
	return cfg, res, out, nil
}

// finish sets r.Image to the OCI image of these layers and config, or
// removes the scratch blobs when it cannot be made. zstd, eStargz and
// EROFS layers need OCI media types throughout (a Docker v2s2 manifest with
// zstd layers is refused by Podman and by containerd < 2.0).
func (r *Result) finish(adds []mutate.Addendum, cfg *v1.ConfigFile) (*Result, error) {
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err := mutate.Append(img, adds...)
	if err == nil {
		img, err = mutate.ConfigFile(img, cfg)
	}
	if err != nil {
		r.Close()
		return nil, err
	}
	r.Image = img
	return r, nil
}

type timedReader struct {
	r io.Reader
	d time.Duration
}

func (t *timedReader) Read(p []byte) (int, error) {
	s := time.Now()
	n, err := t.r.Read(p)
	t.d += time.Since(s)
	return n, err
}

// source is a layer opened for conversion: its blob verified as it
// streams (Drain reads the rest and checks it), decoded, its uncompressed
// bytes hashed for the diff ID check, and the scratch blob the
// conversion writes.
type source struct {
	dg   v1.Hash
	size int64 // the blob's, 0 when unknown
	comp layers.Compression
	vr   *registry.VerifyReader
	td   *timedReader
	uh   hash.Hash
	sc   *layers.Scratch
	// tar is the decoded tar, hashed into uh as it is read.
	tar   io.Reader
	close func()
}

// openSource opens l (a tar layer) for conversion into a scratch blob in
// dir, recording where it comes from in rep.
func openSource(ctx context.Context, l v1.Layer, dir string, o Options, rep *LayerReport) (*source, error) {
	dg, err := l.Digest()
	if err != nil {
		return nil, err
	}
	size, _ := l.Size()
	mt, _ := l.MediaType()
	if err := tarLayer(mt); err != nil {
		return nil, err
	}
	rep.From, rep.FromSize, rep.FromMedia = dg.String(), size, string(mt)
	rc, err := l.Compressed()
	if err != nil {
		return nil, fmt.Errorf("blob %s: %v", dg, err)
	}
	// The source blob is verified as it streams: a registry or layout that
	// serves other bytes fails here, naming the blob.
	vr, err := registry.NewVerifyReader(&layers.CountingReader{R: rc, Progress: o.Progress}, dg, size)
	if err != nil {
		rc.Close()
		return nil, err
	}
	dec, comp, closeDec, err := layers.Decompress(vr)
	if err != nil {
		rc.Close()
		return nil, fmt.Errorf("blob %s: %v", dg, err)
	}
	if err := layers.CheckCompression(mt, comp); err != nil {
		closeDec()
		rc.Close()
		return nil, fmt.Errorf("blob %s: %v", dg, err)
	}
	sc, err := layers.NewScratch(dir)
	if err != nil {
		closeDec()
		rc.Close()
		return nil, err
	}
	s := &source{dg: dg, size: size, comp: comp, vr: vr, td: &timedReader{r: dec}, uh: sha256.New(), sc: sc}
	s.tar = io.TeeReader(layers.ContextReader(ctx, s.td, nil), s.uh)
	s.close = func() { sc.Abort(); closeDec(); rc.Close() }
	return s, nil
}

// maxTar is the most the source's tar can be (layers.MaxDecoded of its
// blob), or erofs.MaxSize when the blob's size is unknown.
func (s *source) maxTar() int64 {
	if s.size <= 0 {
		return erofs.MaxSize
	}
	return layers.MaxDecoded(s.comp, s.size)
}

// check reads the rest of the source blob (its digest and size checked)
// and compares the tar's hash with the config's diff ID.
func (s *source) check(diffID v1.Hash) error {
	if err := s.vr.Drain(); err != nil {
		return err
	}
	if got := hashOf(s.uh); got != diffID {
		return fmt.Errorf("blob %s: uncompressed content hashes to %s, config rootfs.diff_ids says %s: %w", s.dg, got, diffID, registry.ErrDigestMismatch)
	}
	return nil
}

func convertLayer(ctx context.Context, l v1.Layer, diffID v1.Hash, dir string, o Options) (v1.Layer, LayerReport, error) {
	var rep LayerReport
	src, err := openSource(ctx, l, dir, o, &rep)
	if err != nil {
		return nil, rep, err
	}
	defer src.close()
	dg := src.dg
	enc, err := layers.NewZstdWriter(src.sc, o.Level)
	if err != nil {
		return nil, rep, err
	}
	if src.comp == layers.Zstd {
		// Already zstd: recompressing would only cost time.
		rep.Skipped = true
	}
	n, err := io.Copy(enc, src.tar)
	if err != nil {
		enc.Close()
		return nil, rep, fmt.Errorf("blob %s: %v", dg, err)
	}
	if err := src.vr.Drain(); err != nil {
		enc.Close()
		return nil, rep, err
	}
	if err := enc.Close(); err != nil {
		return nil, rep, err
	}
	zdg, file, err := src.commit(diffID, n, &rep)
	if err != nil {
		return nil, rep, err
	}
	// Decode the new blob once, for the report (and as a check that it
	// round-trips).
	t0 := time.Now()
	if err := decodeFile(file, n); err != nil {
		return nil, rep, fmt.Errorf("blob %s: re-reading the zstd output: %v", dg, err)
	}
	rep.ToDecode = time.Since(t0).Seconds()
	return layers.NewFileLayer(file, zdg, diffID, rep.ToSize, -1, types.OCILayerZStd), rep, nil
}

// commit checks the source (check), commits the scratch blob and records
// it in rep: n uncompressed bytes, the source's decode time, the new
// blob's digest, size and ratio. It returns the blob's digest and path.
func (s *source) commit(diffID v1.Hash, n int64, rep *LayerReport) (v1.Hash, string, error) {
	if err := s.check(diffID); err != nil {
		return v1.Hash{}, "", err
	}
	dg, size, file, err := s.sc.Commit()
	if err != nil {
		return v1.Hash{}, "", err
	}
	rep.FromDecode = s.td.d.Seconds()
	rep.Uncompressed = n
	rep.setTo(dg.String(), size)
	return dg, file, nil
}

// setTo records the converted blob, digest to and size, and its ratio to
// the source's size.
func (r *LayerReport) setTo(to string, size int64) {
	r.To, r.ToSize, r.Ratio = to, size, 0
	if r.FromSize > 0 {
		r.Ratio = float64(r.ToSize) / float64(r.FromSize)
	}
}

// tarLayer refuses a layer that holds no tar: a native EROFS layer is a
// filesystem image, which recompressing would pass off as a tar.
func tarLayer(mt types.MediaType) error {
	if layers.IsErofs(mt) {
		return fmt.Errorf("a native EROFS layer (%s), not a tar: convert the image's tar form (TAG or TAG%s, not TAG%s)", mt, layers.ZstdTagSuffix, layers.ErofsTagSuffix)
	}
	return nil
}

func decodeFile(path string, want int64) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	d, err := zstd.NewReader(f, zstd.WithDecoderConcurrency(1))
	if err != nil {
		return err
	}
	defer d.Close()
	n, err := io.Copy(io.Discard, d)
	if err != nil {
		return err
	}
	if n != want {
		return fmt.Errorf("decoded %d bytes, wrote %d", n, want)
	}
	return nil
}

func hashOf(h hash.Hash) v1.Hash {
	return v1.Hash{Algorithm: "sha256", Hex: fmt.Sprintf("%x", h.Sum(nil))}
}
