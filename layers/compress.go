package layers

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"math"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
)

// Compression names a layer's blob encoding.
type Compression string

// The encodings kiln reads. Names match what users see in media types.
const (
	Uncompressed Compression = "none"
	Gzip         Compression = "gzip"
	Zstd         Compression = "zstd"
	// EStargz is gzip laid out for lazy pulls (seekable per-file gzip
	// members, a table of contents at the end, the startup files first):
	// any gzip reader reads it as a plain gzip layer, so DetectCompression
	// calls it Gzip; only kiln's writers name it.
	EStargz Compression = "estargz"
)

var (
	gzipMagic = []byte{0x1f, 0x8b}
	zstdMagic = []byte{0x28, 0xb5, 0x2f, 0xfd}
)

// DetectCompression names the encoding of a blob from its first bytes. Media
// types lie often enough (docker-archive layers, hand-made images) that kiln
// trusts the bytes.
func DetectCompression(head []byte) Compression {
	switch {
	case bytes.HasPrefix(head, gzipMagic):
		return Gzip
	case bytes.HasPrefix(head, zstdMagic):
		return Zstd
	default:
		return Uncompressed
	}
}

// Decompress wraps r in the decoder its magic bytes call for. The returned
// closer releases decoder resources; it does not close r.
func Decompress(r io.Reader) (io.Reader, Compression, func(), error) {
	br := bufio.NewReaderSize(r, 1<<16)
	head, err := br.Peek(4)
	if err != nil && err != io.EOF && err != bufio.ErrBufferFull {
		return nil, "", nil, fmt.Errorf("reading blob header: %w", err)
	}
	switch c := DetectCompression(head); c {
	case Gzip:
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, c, nil, fmt.Errorf("opening gzip stream: %w", err)
		}
		// Every member, as Docker and containerd read it (Go's default):
		// an eStargz layer is one gzip member per file chunk and one for
		// its table of contents, and stopping after the first member would
		// silently ignore the rest (bytes after the last member that are
		// not a member fail the read).
		return zr, c, func() { zr.Close() }, nil
	case Zstd:
		// A single decoder goroutine: layers are decoded several at a time
		// already, and the default would start one goroutine per core per layer.
		zr, err := zstd.NewReader(br, zstd.WithDecoderConcurrency(1), zstd.WithDecoderLowmem(true))
		if err != nil {
			return nil, c, nil, fmt.Errorf("opening zstd stream: %w", err)
		}
		return zr, c, zr.Close, nil
	default:
		return br, c, func() {}, nil
	}
}

// zstdLongWindow is the window NewZstdWriter gives the high levels: CUDA
// libraries repeat kernels and tables across tens of MiB, and a 64 MiB
// window finds 4% more than the encoder's 8 MiB default at levels 10 and
// up (cuBLASLt, cuFFT, libtorch_cuda at 19), at no cost in time. Every
// zstd decoder a puller uses accepts it by default (zstd(1) up to 128 MiB,
// klauspost's, which containerd, Docker and containers/image use, up to
// 512 MiB); at the default level 3 it measured no gain, so the window
// stays small there.
const zstdLongWindow = 64 << 20

// NewZstdWriter returns the zstd encoder every layer kiln writes goes
// through, at a zstd level (1-22). Its output depends only on its input
// and the level: one goroutine, no concurrency-dependent framing.
func NewZstdWriter(w io.Writer, level int) (*zstd.Encoder, error) {
	opts := []zstd.EOption{zstd.WithEncoderLevel(zstd.EncoderLevelFromZstd(level)),
		zstd.WithEncoderConcurrency(1), zstd.WithEncoderCRC(true), zstd.WithZeroFrames(false), zstd.WithLowerEncoderMem(true)}
	if zstd.EncoderLevelFromZstd(level) >= zstd.SpeedBestCompression {
		opts = append(opts, zstd.WithWindowSize(zstdLongWindow))
	}
	return zstd.NewWriter(w, opts...)
}

// maxRatio is the most one byte of each encoding decodes to: deflate's
// longest match (258 bytes) in under two bits, 1032:1; zstd's RLE block,
// 128 KiB from 4 bytes. Bytes that are not compressed are themselves.
var maxRatio = map[Compression]int64{Uncompressed: 1, Gzip: 1032, EStargz: 1032, Zstd: 32 << 10}

// MaxDecoded is the most a blob of size bytes in encoding c can decode to
// (the largest ratio for an encoding kiln does not know): a bound on a
// layer's tar that a header's declared size cannot pass.
func MaxDecoded(c Compression, size int64) int64 {
	r, ok := maxRatio[c]
	if !ok {
		r = maxRatio[Zstd]
	}
	if size > math.MaxInt64/r {
		return math.MaxInt64
	}
	return size * r
}
