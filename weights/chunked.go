package weights

import (
	"context"
)

// A large blob is fetched as parallel HTTP Range requests of ChunkSize
// bytes written with WriteAt into the preallocated .part file, hashed in
// byte order by a follower, with a <hex>.part.ranges record for a rerun:
// blob.FileWriter.Fill, the same engine kiln warm's oci: cache uses.

const (
	// DefaultChunkSize is the Range request size for large blobs.
	DefaultChunkSize = 16 << 20
	// DefaultConcurrency bounds the HTTP connections of one pull.
	DefaultConcurrency = 8
)

// acquire takes one of the pull's Concurrency connection slots.
func (p *puller) acquire(ctx context.Context) (func(), error) {
	select {
	case p.conns <- struct{}{}:
		return func() { <-p.conns }, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}
