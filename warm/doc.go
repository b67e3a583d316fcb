// Package warm pre-warms a host's image store before a container starts
// there: it computes the warm set of an image (its index, the manifest,
// config and layers of the host's platform, found by layers.Walk), asks a
// Store what it already holds, and fetches only what is missing, straight
// from the registry into the target.
//
// The design follows containerd's content store: a Store hands out a
// resumable Writer per blob (containerd: a named ingest; OCI layout: a
// .partial file) whose Offset says how many bytes an earlier, interrupted run
// already wrote; the engine asks the registry for the rest with an HTTP
// Range request, and Commit verifies size and digest before the blob becomes
// visible. Nothing is committed that did not hash to its digest, and a
// killed run resumes where it stopped.
//
// Targets are adapters, each in its own package above this one:
// warm/containerd and warm/ocilayout are Stores (they hold blobs);
// warm/docker is a Loader (its unit is the image): the engine fills a stage
// the Loader opens with its own fetch loop, then the Loader loads the
// images from it, so no adapter calls back into the engine. warm/targets
// opens the adapter a --target names, and Run is one whole kiln warm
// (resolve, check signatures, warm the target and the weights volumes).
// Roles beyond Store and Loader are small interfaces a target may have
// (Unpacker, PipelinedUnpacker, UnpackReporter, Verifier, Leaser,
// ZstdChecker). Every blob of the set carries its layers/blob.Source: a
// registry repository (ranged, retried GETs), an OCI layout or a docker
// archive (warm's local sources: the persistent image cache of a spot
// fleet). The copy itself is
// blob.Copy and the oci layout's ingest blob.Dir, the ones weights pull
// uses. The engine runs blobs in parallel (bounded), splits large blobs
// into parallel Range chunks, rate-limits with one token bucket, and reports
// per blob what it found and did: the report's Ready is the readiness gate
// for a spot node (every digest of the warm set verified present). Every
// descriptor is digest and size: an index listing a manifest with a false
// size is refused. Diff IDs are checked where a layer is decompressed:
// --unpack (warm/containerd), and containerd's or Docker's own unpack at the first
// run; a plain warm verifies the compressed blobs and does not decompress
// them only to hash them (that would cost the unpack's CPU once more).
//
// --unpack (containerd) keeps containerd's snapshot chain; see
// warm/containerd.
package warm
