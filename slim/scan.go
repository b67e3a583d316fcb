package slim

import (
	"archive/tar"
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"fmt"
	"hash"
	"io"

	"github.com/kiln-build/kiln/analyze/classify"
	"github.com/kiln-build/kiln/fatbin"
	"github.com/kiln-build/kiln/internal/parallel"
	"github.com/kiln-build/kiln/layers"
)

// entry kinds.
const (
	kFile = iota
	kDir
	kSymlink
	kHardlink
	kOther // devices, fifos: no content
	kWhiteout
	kOpaque
)

// rec is one tar entry of a source layer as the first pass saw it.
type rec struct {
	layer, ord int
	path       string
	kind       uint8
	size       int64
	mode       int64
	linkname   string // raw, as the tar said (symlinks, hardlinks)
	class      classify.Class
	format     string   // weights format
	sum        [32]byte // content hash, for CUDA libraries (dedupe)
	hasSum     bool
	jit        *jitHit
	linkTo     *rec         // hardlinks: the record holding the content
	elf        *elfInfo     // ELF objects, when the policy prunes libraries
	text       []byte       // the dynamic linker's configuration (etc/ld.so.conf*), when pruning
	fat        *fatbin.Plan // GPU code pruning of a shared library, when Options.GPUs
}

// layerScan is the first pass's result for one layer.
type layerScan struct {
	recs  []*rec
	stats layers.LayerStats
}

// scanLayer reads a layer's headers, sniffs weight candidates, hashes CUDA
// libraries and looks for run-time kernel compilers. Hostile entries fail
// the scan: a slim image must mean what its source meant.
func scanLayer(ctx context.Context, l *layers.Layer, opt *Options) (*layerScan, error) {
	s := &layerScan{}
	head := make([]byte, classify.SniffLen)
	prune := opt.Policy.Prunes()
	var elfHead []byte
	if prune {
		elfHead = make([]byte, elfHeadLen)
	}
	ord := -1
	st, err := l.Walk(ctx, layers.WalkOptions{SkipVerify: opt.SkipVerify, Progress: cmp.Or(opt.ScanProgress, opt.Progress)}, func(e *layers.Entry, body io.Reader) error {
		ord++
		if err := layers.CheckEntry(e); err != nil {
			return err
		}
		r := &rec{layer: l.Index, ord: ord, path: e.Path, mode: e.Header.Mode, linkname: e.Header.Linkname}
		h := e.Header
		switch {
		case e.Opaque:
			r.kind = kOpaque
		case e.Whiteout:
			r.kind = kWhiteout
		case h.Typeflag == tar.TypeDir:
			r.kind = kDir
		case h.Typeflag == tar.TypeSymlink:
			r.kind = kSymlink
			r.class = classify.ClassifyPath(e.Path)
		case h.Typeflag == tar.TypeLink:
			r.kind = kHardlink
			r.class = classify.ClassifyPath(e.Path)
		case e.IsRegular():
			r.kind = kFile
			r.size = h.Size
			r.class = classify.ClassifyPath(e.Path)
			var rd io.Reader = body
			var peek []byte
			weightCand := classify.WeightCandidate(e.Path, r.size)
			if weightCand || (prune || len(opt.GPUs) > 0) && r.size >= 64 {
				n, err := io.ReadFull(body, head)
				if err != nil && err != io.ErrUnexpectedEOF && err != io.EOF {
					return fmt.Errorf("reading %s: %w", e.Path, err)
				}
				peek = head[:n]
				if weightCand {
					if f := classify.SniffWeights(e.Path, peek, r.size); f != "" {
						r.class, r.format = classify.ClassWeights, f
					}
				}
				rd = io.MultiReader(bytes.NewReader(peek), body)
			}
			var fat *fatScan
			if opt.gpuScan(e.Path, peek) {
				// The fat binaries are read from the same stream, whichever
				// reader below consumes it; the rest is drained after.
				fat = newFatScan()
				if _, err := fat.Write(peek); err != nil {
					fat.abort(err)
					return fmt.Errorf("reading %s: %w", e.Path, err)
				}
				body = io.TeeReader(body, fat)
				rd = io.MultiReader(bytes.NewReader(peek), body)
			}
			isObj := prune && isELF(peek)
			if err := func() error {
				switch {
				case isObj:
					// The dynamic facts, read as the file streams; CUDA
					// libraries are hashed on the way.
					var hs hash.Hash
					var tee io.Writer
					if r.class == classify.ClassCUDALibs {
						hs = sha256.New()
						tee = hs
					}
					info, err := readELF(peek, body, tee, elfHead, opt.WorkDir)
					if err != nil {
						return fmt.Errorf("reading %s: %w", e.Path, err)
					}
					r.elf = info
					if hs != nil {
						copy(r.sum[:], hs.Sum(nil))
						r.hasSum = true
					}
				case prune && isLdSoConf(e.Path) && r.size <= 64<<10:
					b, err := io.ReadAll(rd)
					if err != nil {
						return fmt.Errorf("reading %s: %w", e.Path, err)
					}
					r.text = b
				case r.class == classify.ClassCUDALibs && r.size > 0:
					hs := sha256.New()
					if _, err := io.Copy(hs, rd); err != nil {
						return fmt.Errorf("reading %s: %w", e.Path, err)
					}
					copy(r.sum[:], hs.Sum(nil))
					r.hasSum = true
				default:
					hit, err := detectJIT(e.Path, r.size, rd)
					if err != nil {
						return fmt.Errorf("reading %s: %w", e.Path, err)
					}
					r.jit = hit
				}
				return nil
			}(); err != nil {
				if fat != nil {
					fat.abort(err)
				}
				return err
			}
			if fat != nil {
				if _, err := io.Copy(io.Discard, body); err != nil {
					fat.abort(err)
					return fmt.Errorf("reading %s: %w", e.Path, err)
				}
				pl, err := fat.finish(opt)
				if err != nil {
					return fmt.Errorf("reading %s: %w", e.Path, err)
				}
				r.fat = pl
			}
		default:
			r.kind = kOther
		}
		if r.path == "" && r.kind != kOpaque {
			return nil // the root directory itself
		}
		s.recs = append(s.recs, r)
		return nil
	})
	if err != nil {
		return nil, err
	}
	s.stats = st
	return s, nil
}

// scanAll runs scanLayer over every layer, at most opt.Concurrency at once.
func scanAll(ctx context.Context, img *layers.Image, opt *Options) ([]*layerScan, error) {
	scans := make([]*layerScan, len(img.Layers))
	err := parallel.ForEach(ctx, len(img.Layers), opt.Concurrency, func(ctx context.Context, i int) error {
		s, err := scanLayer(ctx, img.Layers[i], opt)
		if err != nil {
			return err
		}
		scans[i] = s
		return nil
	})
	return scans, err
}
