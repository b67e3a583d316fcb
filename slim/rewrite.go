package slim

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/kiln-build/kiln/fatbin"
	"github.com/kiln-build/kiln/internal/parallel"
	"github.com/kiln-build/kiln/layers"
)

// Diverter receives the files a policy moves out of the image (model
// weights). Rewrite calls Divert once per diverted regular file, with its
// content streaming from the layer; the diverter must consume r fully or
// return an error, which fails the rewrite. path is the file's absolute
// path in the image ("/app/models/model.safetensors"); hdr is the layer's
// tar header. Calls are never concurrent.
type Diverter interface {
	Divert(path string, hdr *tar.Header, r io.Reader) error
}

// A MountDiverter is a Diverter whose files come back at run time as one
// directory mounted over the image (a weights volume). Rewrite asks it,
// while planning, where that mount will be (given the absolute paths of
// the weights the policy diverts) and diverts every other regular file
// below that directory too: config, tokenizer, index JSON and whatever
// else sits beside the weights, so that the mount hides nothing the image
// had. A symlink or hardlink below the mount fails the rewrite (the volume
// holds regular files only).
type MountDiverter interface {
	Diverter
	DivertMount(weights []string) (string, error)
}

// DefaultLevel is the zstd level used when Options.Level is 0.
const DefaultLevel = 3

// Options tunes Rewrite.
type Options struct {
	// Policy decides what stays (required).
	Policy *Policy
	// Divert receives weights the policy diverts; nil keeps them in the
	// image (and the report says so).
	Divert Diverter
	// WorkDir holds the segments and the output blobs; the caller removes
	// it after writing the image. Required.
	WorkDir string
	// Level is the zstd level, 1 (fastest) to 22 (smallest); 0 means
	// DefaultLevel.
	Level int
	// Compression lists the blob encodings to write, each a full set of
	// layers for the same tars (Result.ImageFor picks one): layers.Zstd,
	// layers.Gzip or both, in the order given; Image uses the first.
	// Empty means zstd only.
	Compression []layers.Compression
	// MaxLayerSize caps an output layer's uncompressed tar, in bytes: a
	// group larger than that is split by files into several layers (see
	// splitGroups). 0 keeps one layer per group.
	MaxLayerSize int64
	// Force drops what run-time kernel compilers need when the policy says
	// jit: refuse.
	Force bool
	// Concurrency bounds the layers read at once (default: CPUs, at most 4).
	Concurrency int
	// SkipVerify trusts local blobs without hashing them.
	SkipVerify bool
	// ScanProgress and Progress, when set, advance by stored bytes read
	// in the first pass (the scan) and the second (the rewrite): each
	// reads every layer once, so each reaches the image's compressed
	// size. With ScanProgress nil, Progress counts both passes (twice the
	// compressed size).
	ScanProgress, Progress *atomic.Int64
	// GPUs, when set, prunes the GPU code in shared libraries' fat binaries
	// to what this fleet runs (fatbin.Select): the native cubin per GPU and
	// the newest PTX, unless DropPTX. NVIDIA's redistributable libraries
	// are only scanned and reported unless PruneNVIDIA.
	GPUs        []fatbin.GPU
	DropPTX     bool
	PruneNVIDIA bool
}

// Result is a rewritten image whose blobs wait in WorkDir.
type Result struct {
	Report *Report
	src    *layers.Image
	layers []*blobLayer
	policy *Policy
	comps  []layers.Compression
	conc   int // Options.Concurrency, for AddEStargz
}

// Rewrite slims src. It reads every layer twice as a stream (the first pass
// squashes and classifies, the second writes what the policy keeps), writes
// new zstd blobs under WorkDir and returns them with the report. Every
// Divert call has happened before it returns. Nothing outside WorkDir is
// written.
func Rewrite(ctx context.Context, src *layers.Image, opts Options) (*Result, error) {
	start := time.Now()
	if opts.Policy == nil {
		return nil, errors.New("slim: no policy")
	}
	if opts.WorkDir == "" {
		return nil, errors.New("slim: no work directory")
	}
	if err := src.CheckTarLayers("slim"); err != nil {
		return nil, err
	}
	if opts.Level == 0 {
		opts.Level = DefaultLevel
	}
	if opts.Level < 1 || opts.Level > 22 {
		return nil, fmt.Errorf("zstd level %d: must be 1..22", opts.Level)
	}
	if len(opts.Compression) == 0 {
		opts.Compression = []layers.Compression{layers.Zstd}
	}
	for i, c := range opts.Compression {
		if c != layers.Zstd && c != layers.Gzip || slices.Contains(opts.Compression[:i], c) {
			return nil, fmt.Errorf("compression %v: want zstd and/or gzip, each once", opts.Compression)
		}
	}
	if opts.Concurrency <= 0 {
		opts.Concurrency = min(runtime.GOMAXPROCS(0), 4)
	}
	if err := os.MkdirAll(opts.WorkDir, 0o755); err != nil {
		return nil, err
	}
	scans, err := scanAll(ctx, src, &opts)
	if err != nil {
		return nil, fmt.Errorf("image %q: %w", src.Ref.Raw, err)
	}
	pl, err := makePlan(src, scans, &opts)
	if err != nil {
		return nil, fmt.Errorf("image %q: %w", src.Ref.Raw, err)
	}
	w := &writer{opts: &opts, plan: pl, stashes: map[*rec]*stashFile{}}
	for r := range pl.stashIDs {
		w.stashes[r] = &stashFile{ready: make(chan struct{}), file: filepath.Join(opts.WorkDir, fmt.Sprintf("stash-%d", pl.stashIDs[r]))}
	}
	w.segs = make([][]*segment, len(src.Layers))
	for i := range w.segs {
		w.segs[i] = make([]*segment, len(pl.layerNames))
	}
	if err := parallel.ForEach(ctx, len(src.Layers), opts.Concurrency, func(ctx context.Context, i int) error {
		return w.rewriteLayer(ctx, src.Layers[i])
	}); err != nil {
		return nil, fmt.Errorf("image %q: %w", src.Ref.Raw, err)
	}
	for _, s := range w.stashes {
		os.Remove(s.file)
	}
	res := &Result{Report: pl.report, src: src, policy: opts.Policy, comps: opts.Compression, conc: opts.Concurrency}
	if err := w.assemble(ctx, res); err != nil {
		return nil, err
	}
	rep := res.Report
	rep.After.Layers = len(res.layers)
	for _, s := range scans {
		rep.Before.UncompressedSize += s.stats.UncompressedSize
	}
	rep.Seconds = time.Since(start).Seconds()
	if rep.Seconds > 0 {
		rep.MBps = float64(rep.Before.UncompressedSize) / 1e6 / rep.Seconds
	}
	return res, nil
}

type stashFile struct {
	ready chan struct{}
	file  string
	err   error
}

// segment is the part of one output layer that one source layer
// contributes: tar entries without the end marker, in one zstd frame.
type segment struct {
	file    string
	f       *os.File
	bw      *bufio.Writer
	zw      *zstd.Encoder
	tw      *tar.Writer
	entries int
	files   int
	bytes   int64
}

type writer struct {
	opts    *Options
	plan    *plan
	stashes map[*rec]*stashFile
	segs    [][]*segment // [source layer][output layer]
	divert  sync.Mutex
}

func (w *writer) encoder(out io.Writer) (*zstd.Encoder, error) {
	// One goroutine per encoder: layers already run in parallel, and a
	// single-threaded encoder's output depends only on its input.
	return layers.NewZstdWriter(out, w.opts.Level)
}

func (w *writer) segment(layer int, b uint16) (*segment, error) {
	if s := w.segs[layer][b]; s != nil {
		return s, nil
	}
	s := &segment{file: filepath.Join(w.opts.WorkDir, fmt.Sprintf("seg-%03d-%s.zst", layer, w.plan.layerNames[b]))}
	f, err := os.Create(s.file)
	if err != nil {
		return nil, err
	}
	s.f = f
	s.bw = bufio.NewWriterSize(f, 1<<20)
	if s.zw, err = w.encoder(s.bw); err != nil {
		f.Close()
		return nil, err
	}
	s.tw = tar.NewWriter(s.zw)
	w.segs[layer][b] = s
	return s, nil
}

func (s *segment) close() error {
	// Flush, not Close: the end-of-archive marker goes once, after the
	// last segment of the output layer.
	if err := s.tw.Flush(); err != nil {
		s.f.Close()
		return err
	}
	if err := s.zw.Close(); err != nil {
		s.f.Close()
		return err
	}
	if err := s.bw.Flush(); err != nil {
		s.f.Close()
		return err
	}
	return s.f.Close()
}

// outHeader is the header written for r: the source header with the path
// cleaned and the fields that vary between tar writers (atime, ctime)
// dropped. mtimes are kept: they are the file's, not the rewrite's.
func outHeader(p string, h *tar.Header) *tar.Header {
	o := &tar.Header{
		Typeflag: h.Typeflag, Name: p, Linkname: h.Linkname, Size: h.Size, Mode: h.Mode,
		Uid: h.Uid, Gid: h.Gid, Uname: h.Uname, Gname: h.Gname, ModTime: h.ModTime,
		Devmajor: h.Devmajor, Devminor: h.Devminor,
	}
	if h.Typeflag == tar.TypeDir {
		o.Name = p + "/"
	}
	for k, v := range h.PAXRecords {
		// Extended attributes (file capabilities, SELinux labels) are
		// part of the file; times and sizes are re-derived.
		if strings.HasPrefix(k, "SCHILY.xattr.") || strings.HasPrefix(k, "LIBARCHIVE.xattr.") {
			if o.PAXRecords == nil {
				o.PAXRecords = map[string]string{}
			}
			o.PAXRecords[k] = v
		}
	}
	if o.PAXRecords != nil {
		o.Format = tar.FormatPAX
	}
	return o
}

// rewriteLayer is the second pass over one source layer.
func (w *writer) rewriteLayer(ctx context.Context, l *layers.Layer) error {
	acts := w.plan.actions[l.Index]
	ord := -1
	// The scan (the first pass) checked this blob's content against its
	// diff ID; the rewrite still checks the blob's digest.
	_, err := l.Walk(ctx, layers.WalkOptions{SkipVerify: w.opts.SkipVerify, Progress: w.opts.Progress, DiffIDChecked: true}, func(e *layers.Entry, body io.Reader) error {
		ord++
		if ord >= len(acts) || acts[ord] == nil {
			return nil
		}
		a := acts[ord]
		var content io.Reader = body
		if a.stash {
			r := w.recAt(l.Index, ord)
			st := w.stashes[r]
			err := writeStash(st.file, body)
			st.err = err
			close(st.ready)
			if err != nil {
				return fmt.Errorf("keeping %s for a hardlink: %w", e.Path, err)
			}
			if a.op == opEmit || a.op == opDivert {
				f, err := os.Open(st.file)
				if err != nil {
					return err
				}
				defer f.Close()
				content = f
			}
		}
		switch a.op {
		case opSkip:
			return nil
		case opDivert:
			w.divert.Lock()
			err := w.opts.Divert.Divert("/"+e.Path, e.Header, content)
			if err == nil {
				if n, _ := io.Copy(io.Discard, content); n > 0 {
					err = fmt.Errorf("the diverter left %d bytes unread", n)
				}
			}
			w.divert.Unlock()
			if err != nil {
				return fmt.Errorf("diverting %s: %w", e.Path, err)
			}
			return nil
		}
		seg, err := w.segment(l.Index, a.bucket)
		if err != nil {
			return err
		}
		h := outHeader(e.Path, e.Header)
		switch a.op {
		case opSymlink:
			h.Typeflag, h.Linkname, h.Size = tar.TypeSymlink, a.link, 0
			h.Mode = 0o777
			content = nil
		case opMaterialize:
			st := w.stashes[a.src]
			select {
			case <-st.ready:
			case <-ctx.Done():
				return context.Cause(ctx)
			}
			if st.err != nil {
				return st.err
			}
			f, err := os.Open(st.file)
			if err != nil {
				return err
			}
			defer f.Close()
			h.Typeflag, h.Linkname, h.Size = tar.TypeReg, "", a.src.size
			content = f
		case opEmit:
			if e.Header.Typeflag == tar.TypeLink {
				h.Linkname = a.link
			}
		}
		if err := seg.tw.WriteHeader(h); err != nil {
			return fmt.Errorf("writing %s: %w", e.Path, err)
		}
		seg.entries++
		if h.Typeflag == tar.TypeReg && h.Size > 0 {
			var n int64
			var err error
			if a.fat != nil {
				// Same size, same offsets: only fat-binary entries move.
				n, err = fatbin.Prune(seg.tw, content, a.fat)
			} else {
				n, err = io.Copy(seg.tw, content)
			}
			if err != nil {
				return fmt.Errorf("copying %s: %w", e.Path, err)
			}
			if n != h.Size {
				return fmt.Errorf("copying %s: %d of %d bytes", e.Path, n, h.Size)
			}
			seg.files++
			seg.bytes += n
		} else if h.Typeflag == tar.TypeReg {
			seg.files++
		}
		return nil
	})
	for b := range w.segs[l.Index] {
		if s := w.segs[l.Index][b]; s != nil {
			if cerr := s.close(); cerr != nil && err == nil {
				err = cerr
			}
		}
	}
	return err
}

func (w *writer) recAt(layer, ord int) *rec {
	for r := range w.stashes {
		if r.layer == layer && r.ord == ord {
			return r
		}
	}
	return nil
}

func writeStash(file string, r io.Reader) error {
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, r); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// assemble concatenates each output layer's segments, in source-layer
// order, plus a final frame holding the tar end marker, into a blob named by
// its digest; the diff ID is computed by decompressing what was written,
// which also proves the blob decodes.
func (w *writer) assemble(ctx context.Context, res *Result) error {
	blobs := filepath.Join(w.opts.WorkDir, "blobs")
	if err := os.MkdirAll(blobs, 0o755); err != nil {
		return err
	}
	var trailer bytes.Buffer
	zw, err := w.encoder(&trailer)
	if err != nil {
		return err
	}
	zw.Write(make([]byte, 1024))
	if err := zw.Close(); err != nil {
		return err
	}
	nout := len(w.plan.layerNames)
	out := make([]*blobLayer, nout)
	names := make([][]int, nout)
	err = parallel.ForEach(ctx, nout, w.opts.Concurrency, func(ctx context.Context, b int) error {
		// The segments are opened one after another as the output reaches
		// them: an image of 1500 layers holds one open per output layer.
		segs := &seqFiles{}
		defer segs.Close()
		bl := &blobLayer{name: w.plan.layerNames[b]}
		for i := range w.segs {
			s := w.segs[i][b]
			if s == nil {
				continue
			}
			segs.paths = append(segs.paths, s.file)
			bl.entries += s.entries
			bl.files += s.files
			bl.bytes += s.bytes
			names[b] = append(names[b], i)
		}
		if len(segs.paths) == 0 {
			return nil
		}
		if err := writeBlobs(ctx, blobs, io.MultiReader(segs, bytes.NewReader(trailer.Bytes())), bl, w.opts.Compression); err != nil {
			return fmt.Errorf("output layer %s: %w", bl.name, err)
		}
		bl.from = names[b]
		out[b] = bl
		return nil
	})
	if err != nil {
		return err
	}
	for i := range w.segs {
		for _, s := range w.segs[i] {
			if s != nil {
				os.Remove(s.file)
			}
		}
	}
	for _, bl := range out {
		if bl == nil {
			continue
		}
		res.layers = append(res.layers, bl)
		ol := OutLayer{
			Name: bl.name, Digest: bl.blobs[0].digest.String(), DiffID: bl.diffID.String(), CompressedSize: bl.blobs[0].size,
			UncompressedSize: bl.usize, Entries: bl.entries, Files: bl.files, Bytes: bl.bytes, FromLayers: bl.from,
		}
		for _, b := range bl.blobs {
			ol.Blobs = append(ol.Blobs, LayerBlob{Compression: string(b.comp), Digest: b.digest.String(), CompressedSize: b.size})
		}
		res.Report.Layers = append(res.Report.Layers, ol)
		res.Report.After.CompressedSize += bl.blobs[0].size
		res.Report.After.UncompressedSize += bl.usize
	}
	return nil
}

// seqFiles reads the files at paths one after another, each opened when
// the read reaches it and closed at its end.
type seqFiles struct {
	paths []string
	f     *os.File
}

func (s *seqFiles) Read(p []byte) (int, error) {
	for {
		if s.f == nil {
			if len(s.paths) == 0 {
				return 0, io.EOF
			}
			f, err := os.Open(s.paths[0])
			if err != nil {
				return 0, err
			}
			s.f, s.paths = f, s.paths[1:]
		}
		n, err := s.f.Read(p)
		if err == io.EOF {
			s.f.Close()
			s.f = nil
			if n == 0 {
				continue
			}
			err = nil
		}
		return n, err
	}
}

func (s *seqFiles) Close() error {
	if s.f == nil {
		return nil
	}
	err := s.f.Close()
	s.f = nil
	return err
}

func hexHash(h hash.Hash) string { return fmt.Sprintf("%x", h.Sum(nil)) }
