package layers_test

import (
	"bytes"
	"io"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"

	"github.com/kiln-build/kiln/layers"
)

// At the high levels the encoder matches a repeat 10 MiB back (beyond
// zstd's 8 MiB default window: CUDA libraries repeat that far apart); the
// stream decodes with a default decoder; the same input gives the same
// bytes.
func TestNewZstdWriterLongWindow(t *testing.T) {
	block := make([]byte, 10<<20)
	r := rand.NewChaCha8([32]byte{1})
	r.Read(block)
	in := append(append([]byte{}, block...), block...)
	compress := func(level int) []byte {
		var buf bytes.Buffer
		enc, err := layers.NewZstdWriter(&buf, level)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := enc.Write(in); err != nil {
			t.Fatal(err)
		}
		if err := enc.Close(); err != nil {
			t.Fatal(err)
		}
		return buf.Bytes()
	}
	best := compress(19)
	if n := len(best); n > len(block)+len(block)/10 {
		t.Errorf("level 19: %d bytes for two copies of a %d-byte block: the repeat was not matched", n, len(block))
	}
	if again := compress(19); !bytes.Equal(again, best) {
		t.Error("level 19 output differs between two runs")
	}
	dec, err := zstd.NewReader(bytes.NewReader(best))
	if err != nil {
		t.Fatal(err)
	}
	defer dec.Close()
	out, err := io.ReadAll(dec)
	if err != nil || !bytes.Equal(out, in) {
		t.Fatalf("round trip: %v (%d bytes)", err, len(out))
	}
}

// TestMaxDecodedBoundsZeros: zeros, what every encoder compresses best,
// decode to no more than MaxDecoded of their blob, at the encoders'
// strongest settings.
func TestMaxDecodedBoundsZeros(t *testing.T) {
	zeros := make([]byte, 16<<20)
	var gz bytes.Buffer
	w, _ := gzip.NewWriterLevel(&gz, gzip.BestCompression)
	w.Write(zeros)
	w.Close()
	zs, _ := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedBestCompression))
	z := zs.EncodeAll(zeros, nil)
	for _, tc := range []struct {
		c    layers.Compression
		size int
	}{{layers.Gzip, gz.Len()}, {layers.Zstd, len(z)}, {layers.Uncompressed, len(zeros)}} {
		if got := layers.MaxDecoded(tc.c, int64(tc.size)); got < int64(len(zeros)) {
			t.Errorf("%s: %d bytes decode to %d, MaxDecoded says %d", tc.c, tc.size, len(zeros), got)
		}
	}
	if got := layers.MaxDecoded(layers.Zstd, 1<<62); got != math.MaxInt64 {
		t.Errorf("MaxDecoded overflows: %d", got)
	}
}
