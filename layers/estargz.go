package layers

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"path"
	"strconv"
	"strings"

	"github.com/containerd/stargz-snapshotter/estargz"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/klauspost/compress/gzip"
)

// Annotations an eStargz layer's descriptor carries: the stargz snapshotter
// verifies the table of contents against the first and sizes the layer by
// the second without fetching it.
const (
	AnnotationTOCDigest        = estargz.TOCJSONDigestAnnotation
	AnnotationUncompressedSize = estargz.StoreUncompressedSizeAnnotation
)

// EStargzGzipLevel is the deflate level of eStargz blobs: the level of
// kiln's gzip blobs, fixed so that the same tar gives the same blob.
const EStargzGzipLevel = 6

// EStargzBlob is a layer's eStargz encoding, written by WriteEStargz.
type EStargzBlob struct {
	Path   string // the blob, named by its digest's hex in the directory given
	Digest v1.Hash
	Size   int64
	// The eStargz tar is not the source tar (the library rewrites headers
	// and appends its table of contents as a last entry): its own diff ID
	// and size.
	DiffID           v1.Hash
	UncompressedSize int64
	TOCDigest        string
	// StartupFiles is how many startup files the layer holds (placed
	// before the prefetch landmark).
	StartupFiles int
}

// Annotations are the layer descriptor's: the TOC digest and the tar size.
func (b *EStargzBlob) Annotations() map[string]string {
	return map[string]string{AnnotationTOCDigest: b.TOCDigest, AnnotationUncompressedSize: strconv.FormatInt(b.UncompressedSize, 10)}
}

// StartupSet is the files a container opens as it starts (absolute paths
// in the image, in any order), as tar entry names.
type StartupSet map[string]bool

// NewStartupSet reads a list of paths ("/usr/bin/python3").
func NewStartupSet(paths []string) StartupSet {
	s := StartupSet{}
	for _, p := range paths {
		if p = TarName(p); p != "" {
			s[p] = true
		}
	}
	return s
}

// TarName is a path as layer tar entries name it: relative, cleaned, no
// trailing slash; "" for the root.
func TarName(p string) string {
	p = path.Clean("/" + strings.TrimPrefix(p, "./"))
	if p == "/" {
		return ""
	}
	return p[1:]
}

// WriteEStargz writes a layer as eStargz (gzip at EStargzGzipLevel, files
// in chunks of the library's default size, a table of contents at the
// end) into dir, through a Scratch (so dir is the caller's own), with the
// layer's files of startup first, followed by the prefetch landmark: the
// stargz snapshotter fetches that region before it mounts the layer and
// every other file on first read. A layer holding none of them gets the
// no-prefetch landmark instead.
//
// open returns the layer's blob (any encoding Decompress reads); it is
// called twice and read as a stream each time, so no layer is held in
// memory or spooled: the first pass writes the startup entries (with the
// directories above them and the whiteouts in those) in the layer's order,
// the second everything else, so directories still precede what they hold
// and a hard link its target (a startup hard link whose target is not a
// startup file waits for the second pass). The output depends only on the
// tar and the set, not on the list's order, so the same input gives the
// same digest. The blob is decoded again as it is written, for its diff
// ID and size (which the library does not report) and as proof that it
// reads back.
func WriteEStargz(ctx context.Context, open func() (io.ReadCloser, error), dir string, startup StartupSet) (*EStargzBlob, error) {
	first := map[string]bool{}
	for p := range startup {
		first[p] = true
		for d := path.Dir(p); d != "."; d = path.Dir(d) {
			first[d] = true
		}
	}
	sc, err := NewScratch(dir)
	if err != nil {
		return nil, err
	}
	defer sc.Abort() // leaves a committed blob alone
	pr, pw := io.Pipe()
	type res struct {
		sum v1.Hash
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
		done <- res{sum: v1.Hash{Algorithm: "sha256", Hex: fmt.Sprintf("%x", h.Sum(nil))}, n: n, err: err}
	}()
	ew := estargz.NewWriterWithCompressor(io.MultiWriter(sc, pw), estargz.NewGzipCompressorWithLevel(EStargzGzipLevel))
	tr, tw := io.Pipe()
	placed := make(chan int, 1)
	go func() {
		n, err := orderedTar(ctx, tw, open, first, startup)
		tw.CloseWithError(err)
		placed <- n
	}()
	err = ew.AppendTar(tr)
	tr.CloseWithError(err)
	n := <-placed
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
		return nil, err
	}
	if d.sum.String() != ew.DiffID() {
		return nil, fmt.Errorf("eStargz blob decodes to %s, the writer hashed %s", d.sum, ew.DiffID())
	}
	b := &EStargzBlob{DiffID: d.sum, UncompressedSize: d.n, TOCDigest: toc, StartupFiles: n}
	if b.Digest, b.Size, b.Path, err = sc.Commit(); err != nil {
		return nil, err
	}
	return b, nil
}

// orderedTar writes the layer's tar to w as one archive: the entries first
// selects, the landmark, then the rest. It returns how many startup files
// went first.
func orderedTar(ctx context.Context, w io.Writer, open func() (io.ReadCloser, error), first, startup StartupSet) (int, error) {
	tw := tar.NewWriter(w)
	emitted := map[string]bool{}
	placed := 0
	err := eachEntry(ctx, open, func(h *tar.Header, r io.Reader) error {
		name := TarName(h.Name)
		ok := first[name] || strings.HasPrefix(path.Base(name), ".wh.") && first[path.Dir(name)]
		if !ok || h.Typeflag == tar.TypeLink && !emitted[TarName(h.Linkname)] {
			return nil
		}
		if startup[name] {
			placed++
		}
		emitted[name] = true
		return copyEntry(tw, h, r)
	})
	if err != nil {
		return 0, err
	}
	mark := estargz.NoPrefetchLandmark
	if placed > 0 {
		mark = estargz.PrefetchLandmark
	}
	// The library's own landmark: one byte, 0xf, no mode or time.
	if err := tw.WriteHeader(&tar.Header{Name: mark, Typeflag: tar.TypeReg, Size: 1}); err != nil {
		return 0, err
	}
	if _, err := tw.Write([]byte{0xf}); err != nil {
		return 0, err
	}
	if err := eachEntry(ctx, open, func(h *tar.Header, r io.Reader) error {
		if emitted[TarName(h.Name)] {
			return nil
		}
		return copyEntry(tw, h, r)
	}); err != nil {
		return 0, err
	}
	return placed, tw.Close()
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

// eachEntry opens and decodes the blob and calls fn for each tar entry.
func eachEntry(ctx context.Context, open func() (io.ReadCloser, error), fn func(*tar.Header, io.Reader) error) error {
	rc, err := open()
	if err != nil {
		return err
	}
	defer rc.Close()
	r, _, closeDec, err := Decompress(&ctxReader{ctx: ctx, r: rc})
	if err != nil {
		return err
	}
	defer closeDec()
	tr := tar.NewReader(r)
	// The body stops with ctx: a sparse entry yields bytes without
	// reading r.
	body := ContextReader(ctx, tr, nil)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if err := fn(h, body); err != nil {
			return err
		}
	}
}
