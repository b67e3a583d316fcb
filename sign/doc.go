// Package sign signs image and artifact manifests in cosign's formats and
// verifies signatures made by kiln or by the cosign CLI, with keys only
// (no Fulcio, no Rekor: they cannot be reached from a build or GPU host
// here, and a key is what an offline readiness gate can check).
//
// Formats (what `cosign sign --key` v3 writes and `cosign verify --key`
// reads):
//
//   - bundle (default, what cosign v3 writes): a Sigstore bundle v0.3
//     (application/vnd.dev.sigstore.bundle.v0.3+json) holding a DSSE
//     envelope of an in-toto statement whose subject is the signed
//     manifest's digest and whose predicate type is
//     https://sigstore.dev/cosign/sign/v1, with the public key's hint
//     (base64 of the SHA-256 of its PKIX DER, as cosign computes it) and no
//     transparency-log entry. It is stored as an OCI artifact manifest
//     whose subject is the signed manifest: through the referrers API where
//     the registry has it, else in the referrers tag schema's index
//     (sha256-<hex>), which go-containerregistry maintains.
//   - legacy (cosign --new-bundle-format=false): a simple-signing payload
//     in a manifest tagged sha256-<hex>.sig, its signature in the layer's
//     dev.cosignproject.cosign/signature annotation. Verified; also written
//     with Format legacy for consumers that read only the tag.
//
// Invariants:
//   - A signature counts only when it verifies with one of the caller's
//     public keys AND names the exact digest verified (the statement's
//     subject, the simple-signing payload's docker-manifest-digest): a
//     valid signature for another image is refused, not ignored.
//   - Every blob and manifest read is checked against its descriptor's
//     digest and size before it is parsed.
//   - Private key material never reaches an error or a log; errors name
//     the key file and what is wrong with it.
//   - Keys: ECDSA P-256 with SHA-256 (cosign generate-key-pair's and
//     `openssl ecparam -name prime256v1 -genkey` + `openssl pkcs8` keys),
//     as PKCS#8, SEC 1 or cosign's encrypted key file (scrypt +
//     nacl/secretbox, password from COSIGN_PASSWORD).
package sign
