// Package weights moves model weights out of container images into a volume
// that is pulled once and mounted, instead of travelling through every image
// pull.
//
// A Collector receives the weight files a slim rewrite diverts out of an
// image's layers, streams each one into a content-addressed blob on disk
// (hashing as it goes, never holding a file in memory) and Publishes them as
// an OCI artifact shaped after the CNCF ModelPack media types: each large
// file is one uncompressed ".raw" layer whose digest is the file's sha256,
// small files are packed together into one deterministic tar. The artifact
// also carries a volume Manifest (versioned JSON, see docs/weights.md): every
// file's path, size, sha256, mode and carrying layer, the mount path, the
// source image digest and a packing-independent set digest that equals
// `sha256sum` output piped into sha256sum.
//
// Pull materialises a volume from an artifact or a manifest: the model files
// in DIR/model (the directory the application mounts), kiln's bookkeeping
// beside it. Blobs are fetched in parallel through a blob.Source, resumed
// with HTTP Range after an interruption (partial files live in
// DIR/.kiln-partial), verified before an atomic rename into place, and a
// readiness marker (DIR/.kiln-ready holding the set digest) is written
// last. A volume of kiln's old layout (files at DIR's top level) is moved
// into DIR/model first, by renames. Every path is checked component by
// component so that a hostile manifest or tar cannot write outside DIR.
// Verify checks a volume offline; RunArgs prints the docker, Compose and
// Kubernetes snippets that mount it.
//
// The producer's ending after the rewrite — the artifact named by digest,
// its image twin, the stripped image labelled and written, the artifact's
// SBOM and the signatures (through layers/publish) — is package
// weights/strip, so the consumer (kiln warm) depends on none of publish,
// sbom or sign.
package weights
