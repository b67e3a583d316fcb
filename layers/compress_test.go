package layers_test

import (
	"bytes"
	"io"
	"math/rand/v2"
	"testing"

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
