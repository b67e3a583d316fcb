// Package refresh regenerates kiln's fastest-moving compatibility facts
// from the live sources they come from, for `kiln compat refresh`:
//
//   - PyTorch's release matrix (pytorch/pytorch RELEASE.md, "Release
//     Compatibility Matrix"): which CUDA variants of a torch release are
//     official (stable or experimental), their cuDNN, the Python range;
//   - the PyTorch wheel indexes, one PEP 503/691 simple index per CUDA
//     variant (download.pytorch.org/whl/cu126/torch/ ...): which torch,
//     torchvision and torchaudio versions exist, for which CPython;
//   - the registry's tag list of nvidia/cuda (OCI distribution API,
//     paginated by Link headers, bearer-token auth): which X.Y.Z tags are
//     published and whether they have a cuDNN variant.
//
// Invariants:
//
//   - Nothing is replaced silently. Run returns a recipes.DataFile whose
//     Changes list every fact that differs from the base data (added,
//     removed, changed), each with the source URL that says so and the
//     date it was read. Refreshing against sources that agree with the base
//     yields no changes.
//   - A variant an index lists but the release matrix does not (2.11.0+cu129)
//     is kept, marked Unofficial: the resolver never picks it unless a
//     recipe names it.
//   - Facts no live source carries (compiled GPU archs, C++11 ABI, driver
//     tables, FlashAttention and bitsandbytes) are carried over from the
//     base data; for a new row they are copied from the nearest older
//     release with the same variant and marked confidence C.
//   - A source that cannot be read fails the refresh: a partial read would
//     show up as removals.
//   - Every network read goes through registry.HTTPClient or the layers
//     registry options: idle timeouts, retries with backoff, credentials
//     redacted from errors.
package refresh
