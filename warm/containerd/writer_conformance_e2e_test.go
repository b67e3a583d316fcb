package containerd

import (
	"context"
	"testing"

	"github.com/containerd/containerd/v2/core/content"
	"github.com/kiln-build/kiln/internal/testdaemon"
	"github.com/kiln-build/kiln/layers/blob/blobtest"
	"github.com/kiln-build/kiln/warm"
	"github.com/kiln-build/kiln/warm/internal/warmtest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

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
			c, err := Open(ctx, ci.Socket, Options{Ingest: mode})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if err := c.Lease(ctx, &warm.Set{}); err != nil {
				t.Fatal(err)
			}
			defer c.Release(ctx)
			if root, why := c.Direct(); (root != "") != (mode == IngestDirect) {
				t.Fatalf("direct root %q (%s) under %s", root, why, mode)
			}
			blobtest.Run(t, func(t *testing.T) blobtest.Store {
				return warmtest.BlobStore{Store: c, ReadBlob: func(ctx context.Context, d ocispec.Descriptor) ([]byte, error) {
					return content.ReadBlob(c.nsCtx(ctx), c.cs, d)
				}}
			})
		})
	}
}
