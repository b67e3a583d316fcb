// Package convert recompresses an image's layers without a daemon. The
// source is opened as every verb opens one (layers.Open) and read through
// its ggcr view ((*layers.Image).V1); each layer streams through a decoder
// and a zstd encoder into a layers.Scratch (hashing both the
// compressed output and the uncompressed tar on the way, so the new blob's
// digest is known and the layer's diff ID is checked against the config),
// layers in parallel; the result is an OCI image with the same config and
// diff IDs, written with layers.Write.
//
// ToEStargz re-lays those zstd blobs as eStargz; ToErofs streams each
// verified, decoded tar into mkfs.erofs instead (layers/erofs), for native
// EROFS layers whose blob digests are their diff IDs.
package convert
