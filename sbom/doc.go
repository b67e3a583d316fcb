// Package sbom writes CycloneDX 1.6 JSON software bills of materials (and
// the same components as SPDX 2.3 JSON, BOM.SPDX) for
// what kiln knows for certain about an image or artifact, and attaches
// them the way BuildKit attaches attestations.
//
// Contents: the packages dpkg records as installed (/var/lib/dpkg/status),
// the Python distributions of site-packages and dist-packages (their
// .dist-info METADATA), the CUDA libraries found by file name with their
// full versions (libcudart.so.12.4.127, libcudnn.so.9.1.0, ...) and, for a
// weights artifact, every file with its SHA-256. A slimmed image's BOM
// also says, in metadata properties, what slim removed (per class: files
// and bytes). Nothing is guessed: a component is listed only when a file
// of the image states it.
//
// Attachment:
//   - images: an image index holding the image manifest and an
//     attestation manifest (platform unknown/unknown, annotations
//     vnd.docker.reference.type=attestation-manifest and
//     vnd.docker.reference.digest=<image manifest>) whose layers are
//     in-toto statements (application/vnd.in-toto+json, annotation
//     in-toto.io/predicate-type), one per document (CycloneDX, SPDX), with
//     the image manifest as subject: BuildKit's layout, which crane,
//     buildx imagetools and kiln host check read; runtimes skip the
//     unknown platform.
//   - artifacts (weights): an OCI referrer of the artifact's manifest,
//     artifactType application/vnd.cyclonedx+json.
//
// Why CycloneDX first: its published 1.6 JSON schema ships in the
// CycloneDX Go module, so the tests validate every BOM kiln writes against
// it without a download or a vendored copy. The SPDX rendering is there for
// readers that only know BuildKit's SPDX attestations (buildx imagetools).
//
// Invariants: components are sorted (type, name, version) and the BOM's
// serial number is derived from the subject digest, so the same image
// gives the same bytes apart from the timestamp; nothing is read past
// 1 MiB per metadata file.
package sbom
