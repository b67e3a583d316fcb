package slim

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/containerd/stargz-snapshotter/estargz"
	"github.com/klauspost/compress/gzip"

	"github.com/kiln-build/kiln/layers"
)

// Annotations an eStargz layer's descriptor carries: the stargz snapshotter
// verifies the table of contents against the first and sizes the layer by
// the second without fetching it.
const (
	AnnotationTOCDigest        = estargz.TOCJSONDigestAnnotation
	AnnotationUncompressedSize = estargz.StoreUncompressedSizeAnnotation
)

// AddEStargz writes every layer once more as an eStargz blob (gzip at
// GzipLevel, files in chunks of the library's default size, a table of
// contents at the end), with the files of startup that are in the layer
// placed first and followed by the prefetch landmark: the stargz
// snapshotter fetches that region before it mounts the layer and every
// other file on first read. A layer holding none of them gets the
// no-prefetch landmark instead. startup lists absolute paths in the image
// (what Probe recorded); its order does not matter.
//
// Each layer's existing blob is decoded twice, as a stream: the first pass
// writes the startup entries (with the directories above them and their
// whiteouts) in the layer's order, the second everything else, so that
// directories still precede what they hold and a hard link its target (a
// startup hard link whose target is not a startup file waits for the
// second pass). The bytes depend only on the layer's tar and the set of
// startup paths, so the same input gives the same digests. The eStargz
// tar is not the other encodings' tar (the library rewrites headers and
// appends its table of contents as a last entry), so its layers have their
// own diff IDs and ImageFor(layers.EStargz) its own image ID.
func (r *Result) AddEStargz(ctx context.Context, startup []string) error {
	if slices.Contains(r.comps, layers.EStargz) {
		return fmt.Errorf("slim: eStargz blobs already written")
	}
	want := map[string]bool{}
	for _, p := range startup {
		if p = tarName(p); p != "" {
			want[p] = true
		}
	}
	for i, l := range r.layers {
		n, err := writeEStargz(ctx, l, want)
		if err != nil {
			return fmt.Errorf("slim: eStargz of the %s layer: %w", l.name, err)
		}
		if r.Report != nil && i < len(r.Report.Layers) {
			b := l.blobs[len(l.blobs)-1]
			r.Report.Layers[i].Blobs = append(r.Report.Layers[i].Blobs, LayerBlob{Compression: string(b.comp), Digest: b.digest.String(),
				CompressedSize: b.size, DiffID: b.diffID.String(), StartupFiles: n})
		}
	}
	r.comps = append(r.comps, layers.EStargz)
	return nil
}

// tarName is a path as tar entries of kiln's layers name it: relative,
// cleaned, no trailing slash.
func tarName(p string) string {
	p = path.Clean("/" + strings.TrimPrefix(p, "./"))
	if p == "/" {
		return ""
	}
	return p[1:]
}

// writeEStargz adds l's eStargz blob and returns how many startup files
// it placed first.
func writeEStargz(ctx context.Context, l *blobLayer, want map[string]bool) (startup int, err error) {
	src := l.blobs[0]
	dir := filepath.Dir(src.path)
	// Which entries go first: the startup files, the directories above
	// them, and the whiteouts in those directories.
	first := map[string]bool{}
	for p := range want {
		first[p] = true
		for d := path.Dir(p); d != "."; d = path.Dir(d) {
			first[d] = true
		}
	}
	sink, err := newSink(dir, layers.EStargz)
	if err != nil {
		return 0, err
	}
	defer func() {
		if err != nil {
			sink.abort()
		}
	}()
	// The blob is decoded again as it is written: the diff ID and the size
	// of its tar (which the library does not report) and a proof that it
	// reads back as one gzip stream of members.
	pr, pw := io.Pipe()
	type res struct {
		sum string
		n   int64
		err error
	}
	done := make(chan res, 1)
	go func() {
		zr, err := gzip.NewReader(pr)
		if err != nil {
			pr.CloseWithError(err)
			done <- res{err: err}
			return
		}
		h := sha256.New()
		n, err := io.Copy(h, zr)
		pr.CloseWithError(err)
		done <- res{sum: hexHash(h), n: n, err: err}
	}()
	ew := estargz.NewWriterWithCompressor(io.MultiWriter(sink, pw), estargz.NewGzipCompressorWithLevel(GzipLevel))
	tr, tw := io.Pipe()
	placed := make(chan int, 1)
	go func() {
		n, err := orderedTar(ctx, tw, src, first, want)
		tw.CloseWithError(err)
		placed <- n
	}()
	err = ew.AppendTar(tr)
	tr.CloseWithError(err)
	startup = <-placed
	var toc string
	if err == nil {
		var d interface{ String() string }
		if d, err = ew.Close(); err == nil {
			toc = d.String()
		}
	}
	pw.CloseWithError(err)
	d := <-done
	if err == nil {
		err = d.err
	}
	if err != nil {
		return 0, err
	}
	if got := "sha256:" + d.sum; got != ew.DiffID() {
		return 0, fmt.Errorf("blob decodes to %s, the writer hashed %s", got, ew.DiffID())
	}
	b, err := sink.commit(dir)
	if err != nil {
		return 0, err
	}
	b.diffID, b.usize = layersHash(d.sum), d.n
	b.annotations = map[string]string{AnnotationTOCDigest: toc, AnnotationUncompressedSize: strconv.FormatInt(d.n, 10)}
	l.blobs = append(l.blobs, b)
	return startup, nil
}

// orderedTar writes src's tar to w as one archive: the entries first
// selects, the landmark, then the rest.
func orderedTar(ctx context.Context, w io.Writer, src blob, first, want map[string]bool) (int, error) {
	tw := tar.NewWriter(w)
	emitted := map[string]bool{}
	startup := 0
	err := eachEntry(ctx, src, func(h *tar.Header, r io.Reader) error {
		name := tarName(h.Name)
		base := path.Base(name)
		ok := first[name] || strings.HasPrefix(base, ".wh.") && first[path.Dir(name)]
		if !ok || h.Typeflag == tar.TypeLink && !emitted[tarName(h.Linkname)] {
			return nil
		}
		if want[name] {
			startup++
		}
		emitted[name] = true
		return copyEntry(tw, h, r)
	})
	if err != nil {
		return 0, err
	}
	mark := estargz.NoPrefetchLandmark
	if startup > 0 {
		mark = estargz.PrefetchLandmark
	}
	// The library's own landmark: one byte, 0xf, no mode or time.
	if err := tw.WriteHeader(&tar.Header{Name: mark, Typeflag: tar.TypeReg, Size: 1}); err != nil {
		return 0, err
	}
	if _, err := tw.Write([]byte{0xf}); err != nil {
		return 0, err
	}
	if err := eachEntry(ctx, src, func(h *tar.Header, r io.Reader) error {
		if emitted[tarName(h.Name)] {
			return nil
		}
		return copyEntry(tw, h, r)
	}); err != nil {
		return 0, err
	}
	return startup, tw.Close()
}

func copyEntry(tw *tar.Writer, h *tar.Header, r io.Reader) error {
	if err := tw.WriteHeader(h); err != nil {
		return fmt.Errorf("entry %s: %w", h.Name, err)
	}
	if _, err := io.Copy(tw, r); err != nil {
		return fmt.Errorf("entry %s: %w", h.Name, err)
	}
	return nil
}

// eachEntry decodes blob b and calls fn for each tar entry in order.
func eachEntry(ctx context.Context, b blob, fn func(*tar.Header, io.Reader) error) error {
	f, err := os.Open(b.path)
	if err != nil {
		return err
	}
	defer f.Close()
	r, _, closeDec, err := layers.Decompress(&ctxReader{ctx: ctx, r: f})
	if err != nil {
		return fmt.Errorf("blob %s: %w", b.digest, err)
	}
	defer closeDec()
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("blob %s: %w", b.digest, err)
		}
		if err := fn(h, tr); err != nil {
			return err
		}
	}
}
