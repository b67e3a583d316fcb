// Package containerd is kiln warm's containerd target: a warm.Store over
// containerd's content store (one named, resumable ingest per blob,
// written through the gRPC content API or, when the daemon's content root
// is local, directly into it; see ingest_direct.go), with a lease per run,
// image records and GC labels, and --unpack into a snapshotter.
//
// --unpack (containerd) keeps containerd's snapshot chain: each layer's
// snapshot is committed under its chain ID, on its parent, in manifest
// order, only after containerd committed (verified) the layer blob and the
// uncompressed stream hashed to the config's diff ID; the blob then gets
// the uncompressed label and the config the gc.ref.snapshot label, as
// containerd's own unpack sets them. Layers are applied while they
// download (from the growing direct ingest) and, on overlayfs, several at
// once ahead of their parents (unpack_staged.go: a parentless snapshot
// joined to the chain by rebase on containerd 2.x, by exchanging
// directories on 1.6, with undeclared parent directories given the lower
// layers' attributes). A snapshot that is not committed is removed; one a
// killed run leaves is under the run's lease.
package containerd
