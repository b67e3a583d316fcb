package ocilayout

import (
	"context"
	"os"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/kiln-build/kiln/layers/blob/blobtest"
	"github.com/kiln-build/kiln/warm/internal/warmtest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// The oci: target's writer passes the blob.Writer conformance suite.
func TestOCILayoutWriterConformance(t *testing.T) {
	blobtest.Run(t, func(t *testing.T) blobtest.Store {
		l, err := New(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		return warmtest.BlobStore{Store: l, ReadBlob: func(ctx context.Context, d ocispec.Descriptor) ([]byte, error) {
			return os.ReadFile(l.blobs().Path(v1.Hash{Algorithm: "sha256", Hex: d.Digest.Encoded()}))
		}}
	})
}
