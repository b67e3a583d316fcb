// Package hostcheck answers "will this image start and use the GPU on this
// host?" before a long run or before renting. It has three parts:
//
//   - a host description (Host): driver, GPUs, NVIDIA Container Toolkit,
//     container engines, registry credentials, volumes — gathered live from a
//     root directory and nvidia-smi (Gather), or read from a captured JSON
//     file (LoadHost) so a host can be planned for before it is rented;
//   - an image description (Image): CUDA version, NVIDIA_REQUIRE_CUDA and
//     the GPU architectures compiled into it, read from an image config,
//     its fat binaries (analyze's kernel report) or a kiln lock file;
//   - the checks (Check): each item passes, warns, fails or is skipped, with
//     the evidence and the fix.
//
// Driver facts (toolkit drivers, minor-version floors, GPU brands and
// compute capabilities) come from the recipes compatibility database; this
// package keeps no table of its own.
package hostcheck
