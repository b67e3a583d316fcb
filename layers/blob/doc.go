// Package blob is kiln's one way to read content-addressed blobs from
// wherever they are: a registry (through registry.Client, one per
// repository, sharing one transport, keychain and retry policy), an OCI
// image layout, or sections of a local file (a docker archive's members).
// layers (manifests, indexes and configs of layouts: layers.Open), warm
// and weights read every blob through a Source; no other package opens
// registry blobs or layout files by digest. It sits below layers and
// above registry. The blobs kiln makes itself (slim's and convert's new
// layers, eStargz blobs, weights' diverted files and packed layers) are
// written through layers.Scratch, which hashes them as they are written
// and names them by digest.
//
// Invariants:
//   - A Source hands out bytes, never verdicts: Open returns exactly the
//     range asked for (or an error), and the caller verifies the digest and
//     size of the whole blob (registry.VerifyReader, ReadVerified) before it
//     trusts or commits it. A Source never retries a range it handed out;
//     retries with backoff and idle timeouts are the registry Client's
//     (registry/fetch.go), and the one policy for every remote read.
//   - A digest is checked for shape before it becomes a path: a layout
//     never opens anything outside blobs/<algorithm>/.
//   - OrderedReader bounds memory by (parallel+2) chunk buffers reused for
//     the whole blob, whatever the blob's size.
//   - A copy's follower (CopyOptions.Follow: warm's check of a layer's
//     content) sees the blob's bytes in order from the first, as the
//     digest is computed over them, and cannot fail the copy; a file
//     writer reads back what it resumes, so only a stream that resumes
//     bytes it cannot read back goes unfollowed (CopyResult.Followed).
//   - One Limiter paces every byte a run moves (image blobs and weights
//     volumes alike), in pieces no larger than its burst.
package blob
