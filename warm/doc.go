// Package warm pre-warms a host's image store before a container starts
// there: it computes the warm set of an image (its index, the manifest,
// config and layers of the host's platform), asks a Store what it already
// holds, and fetches only what is missing, straight from the registry into
// the target.
//
// The design follows containerd's content store: a Store hands out a
// resumable Writer per blob (containerd: a named ingest; OCI layout: a
// .partial file) whose Offset says how many bytes an earlier, interrupted run
// already wrote; the engine asks the registry for the rest with an HTTP
// Range request, and Commit verifies size and digest before the blob becomes
// visible. Nothing is committed that did not hash to its digest, and a
// killed run resumes where it stopped.
//
// Targets are adapters: Stores (containerd, oci layout) hold blobs; a
// Loader (the docker engine) takes whole images, staged for it in a
// Store by the same engine. Every blob
// of the set carries its layers/blob.Source: a registry repository (ranged,
// retried GETs), an OCI layout or a docker archive (warm's local sources:
// the persistent image cache of a spot fleet). The copy itself is
// blob.Copy and the oci layout's ingest blob.Dir, the ones weights pull
// uses. The engine runs blobs in parallel (bounded), splits large blobs
// into parallel Range chunks, rate-limits with one token bucket, and reports
// per blob what it found and did: the report's Ready is the readiness gate
// for a spot node (every digest of the warm set verified present). Every
// descriptor is digest and size: an index listing a manifest with a false
// size is refused. Diff IDs are checked where a layer is decompressed:
// --unpack (below), and containerd's or Docker's own unpack at the first
// run; a plain warm verifies the compressed blobs and does not decompress
// them only to hash them (that would cost the unpack's CPU once more).
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
package warm
