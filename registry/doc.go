// Package registry is kiln's one client for OCI registries: the keychain
// (Docker config and credential helpers, time-limited, their output never
// quoted), the guarded transport (idle timeouts, a minimum rate, redacted
// error bodies), the retry policy, the Fetcher that reads blobs by Range
// and resumes broken bodies, errors in words (RedactError: what happened
// and what to do, secrets removed), and the verified read of a blob
// (VerifyReader: digest and size).
//
// It sits below layers and layers/blob and imports neither: layers reads
// images through it, blob reads blobs through it, and layers keeps its
// old names (layers.Option, layers.Fetcher, ...) as aliases of these while
// callers move.
//
// Invariants:
//   - Nothing here puts a credential in an error or a log: every secret
//     the keychain hands out, every Authorization header and every signed
//     URL's query is remembered and removed by Redact.
//   - One retry policy (retries, doubling backoff, Retry-After, a cap)
//     for every read; a broken body resumes from its last byte.
//   - The bytes handed out are not trusted here: the caller verifies the
//     whole blob against its descriptor (NewVerifyReader).
package registry
