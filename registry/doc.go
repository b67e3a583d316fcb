// Package registry is kiln's one client for OCI registries: the keychain
// (Docker config and credential helpers, time-limited, their output never
// quoted), the guarded transport (idle timeouts, a minimum rate, redacted
// error bodies), the retry policy, the Client of one repository (its
// manifests, and its blobs by Range, resuming broken bodies, after one
// token exchange; a Pool holds one per repository), registry mirrors
// (WithMirrors: a read Client tries its registry's mirrors, then the
// registry; LoadMirrors reads --mirror, $KILN_MIRROR, daemon.json and
// hosts.toml), errors in words (RedactError: what happened
// and what to do, secrets removed), and the verified read of a blob
// (VerifyReader: digest and size).
//
// It sits below layers and layers/blob and imports neither: layers reads
// images through it, blob reads blobs through it, and layers keeps its
// old names (registry.Option, registry.Client, ...) as aliases of these while
// callers move.
//
// Invariants:
//   - Nothing here puts a credential in an error or a log: every secret
//     the keychain hands out, every Authorization header and every signed
//     URL's query is remembered and removed by Redact.
//   - One retry policy (retries, doubling backoff, Retry-After, a cap)
//     for every read; a broken body resumes from its last byte.
//   - One login per repository per Pool: every manifest, blob and
//     referrers read of a repository, and every write (WithPush: the
//     token asks for push too), goes through its Client's transport. A
//     repository read first and written after logs in once more. A verb
//     makes its options Pooled once as it starts (cmdutil.ImageFlags,
//     kiln build's registryOptions), so its reads, writes, SBOMs and
//     signatures share the Pool.
//   - The bytes handed out are not trusted here: the caller verifies the
//     whole blob against its descriptor (NewVerifyReader).
package registry
