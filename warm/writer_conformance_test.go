package warm

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/containerd/containerd/v2/core/content"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/kiln-build/kiln/internal/testdaemon"
	"github.com/kiln-build/kiln/layers/blob"
	"github.com/kiln-build/kiln/layers/blob/blobtest"
)

// storeUnderTest is a warm Store as the blobtest suite sees it: a writer
// per descriptor, and the committed bytes read back the store's own way.
type storeUnderTest struct {
	Store
	read func(ctx context.Context, d ocispec.Descriptor) ([]byte, error)
}

func descriptor(dg v1.Hash, size int64) ocispec.Descriptor {
	return ocispec.Descriptor{MediaType: ocispec.MediaTypeImageLayerGzip, Digest: digest.Digest(dg.String()), Size: size}
}

func (s storeUnderTest) Writer(ctx context.Context, dg v1.Hash, size int64) (blob.Writer, error) {
	return s.Store.Writer(ctx, descriptor(dg, size))
}

func (s storeUnderTest) Read(ctx context.Context, dg v1.Hash, size int64) ([]byte, error) {
	d := descriptor(dg, size)
	ok, err := s.Has(ctx, d)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("blob %s: not committed", dg)
	}
	return s.read(ctx, d)
}

// The oci: target's writer passes the blob.Writer conformance suite.
func TestOCILayoutWriterConformance(t *testing.T) {
	blobtest.Run(t, func(t *testing.T) blobtest.Store {
		l, err := NewOCILayout(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		return storeUnderTest{l, func(ctx context.Context, d ocispec.Descriptor) ([]byte, error) {
			return os.ReadFile(l.blobs().Path(v1.Hash{Algorithm: "sha256", Hex: d.Digest.Encoded()}))
		}}
	})
}

// containerd's writers, through the daemon (grpc) and straight into its
// ingest (direct), pass the blob.Writer conformance suite: one daemon per
// mode (every case writes blobs of its own), under a lease so that no
// committed blob is collected while the suite reads it.
func TestContainerdWriterConformance(t *testing.T) {
	testdaemon.SkipShort(t)
	ctx := context.Background()
	for _, mode := range []string{IngestGRPC, IngestDirect} {
		t.Run(mode, func(t *testing.T) {
			ci := testdaemon.StartContainerd(t)
			tgt, err := OpenTarget(ctx, TargetSpec{Kind: "containerd", Addr: ci.Socket}, TargetOptions{Ingest: mode})
			if err != nil {
				t.Fatal(err)
			}
			defer tgt.Close()
			c := tgt.(*Containerd)
			if err := c.Lease(ctx, &Set{}); err != nil {
				t.Fatal(err)
			}
			defer c.Release(ctx)
			if root, why := c.Direct(); (root != "") != (mode == IngestDirect) {
				t.Fatalf("direct root %q (%s) under %s", root, why, mode)
			}
			blobtest.Run(t, func(t *testing.T) blobtest.Store {
				return storeUnderTest{c, func(ctx context.Context, d ocispec.Descriptor) ([]byte, error) {
					return content.ReadBlob(c.nsCtx(ctx), c.cs, d)
				}}
			})
		})
	}
}
