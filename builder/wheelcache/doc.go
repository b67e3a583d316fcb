// Package wheelcache keeps the wheels kiln compiles from source (a
// FlashAttention `build: source`, any sdist-only requirement) in a registry
// repository, as OCI artifacts, so that a build on an empty BuildKit (an
// ephemeral CI runner) fetches a wheel instead of compiling it for hours.
//
// A wheel is keyed by exactly what determines its bytes (wheelkey.Key):
// the package and version, the source archive's digest, torch's version and CUDA
// variant, the CUDA toolkit, Python's version and ABI tag, the C++ ABI, the
// platform, the GPU architecture list, the image it is compiled in and the
// build flags. The key's sha256 names the artifact's tag; the full key is
// in the manifest's annotations, and a lookup checks it field by field, so
// a tag that names another key is a miss, never a wrong wheel.
//
// Invariants:
//   - A wheel enters a build only after its bytes matched the manifest's
//     digest and size (registry.VerifyReader); a corrupt or truncated blob
//     is refused (ErrCorrupt) and the caller compiles instead.
//   - Files are written atomically (internal/atomicfile): a wheel file in
//     the directory Fetch writes to is whole and verified.
//   - A lookup never reuses a wheel compiled for other GPU architectures
//     unless the cache was opened WithAllowWiderArchs, and then only a
//     wheel whose list covers every architecture asked for (Entry.Wider
//     says so, for the build's output).
//   - Blobs stream from the file to the registry and back; no wheel is
//     held in memory.
package wheelcache
