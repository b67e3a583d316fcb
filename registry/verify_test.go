package registry_test

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/kiln-build/kiln/registry"
)

// TestVerifyReaderInBackground: with the hash in a goroutine of its own,
// the reader still passes the bytes through unchanged, accepts the blob
// its descriptor names and refuses one byte changed, a short blob and a
// long one, at the read that reaches the end, as the inline hash does.
func TestVerifyReaderInBackground(t *testing.T) {
	blob := bytes.Repeat([]byte("kiln layer bytes "), 200_000) // 3.4 MB: many hash buffers
	want := v1.Hash{Algorithm: "sha256", Hex: fmt.Sprintf("%x", sha256.Sum256(blob))}
	bad := bytes.Clone(blob)
	bad[len(bad)/2] ^= 1
	cases := []struct {
		name string
		body []byte
		want error
	}{
		{"intact", blob, nil},
		{"one byte changed", bad, registry.ErrDigestMismatch},
		{"short", blob[:len(blob)-1], registry.ErrSizeMismatch},
		{"long", append(bytes.Clone(blob), 'x'), registry.ErrSizeMismatch},
	}
	for _, c := range cases {
		for _, bg := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/background=%v", c.name, bg), func(t *testing.T) {
				var opts []registry.VerifyOption
				if bg {
					opts = append(opts, registry.HashInBackground())
				}
				vr, err := registry.NewVerifyReader(bytes.NewReader(c.body), want, int64(len(blob)), opts...)
				if err != nil {
					t.Fatal(err)
				}
				defer vr.Close()
				var out bytes.Buffer
				_, err = io.CopyBuffer(&out, vr, make([]byte, 7919)) // odd reads, smaller than a buffer
				if c.want == nil {
					if err != nil || !bytes.Equal(out.Bytes(), blob) {
						t.Fatalf("err = %v, %d bytes out; want the blob", err, out.Len())
					}
					return
				}
				if !errors.Is(err, c.want) {
					t.Fatalf("err = %v, want %v", err, c.want)
				}
			})
		}
	}
}
