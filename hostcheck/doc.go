// Package hostcheck answers "will this image start and use the GPU on this
// host?" before a long run or before renting. It has three parts:
//
//   - a host description (Host): driver, GPUs, NVIDIA Container Toolkit,
//     container engines, registry credentials, volumes, and the runtimes'
//     pull settings (containerd's config with its hosts.toml mirrors,
//     Docker's daemon.json: what decides pull speed and whether warmed
//     layers stay) — gathered live from a
//     root directory and nvidia-smi (Gather), or read from a captured JSON
//     file (LoadHost) so a host can be planned for before it is rented;
//   - an image description (Image): CUDA version, NVIDIA_REQUIRE_CUDA and
//     the GPU architectures compiled into it, read from an image config,
//     its fat binaries (analyze's kernel report) or a kiln lock file;
//   - the checks (Check): each item passes, warns, fails or is skipped, with
//     the evidence and the fix.
//
// containerd's settings are read as the daemon reads them — `containerd
// config dump` where a binary is known, else the file and its imports
// merged containerd's way — because the effective value, not the file's
// line, decides a pull (containerd 2.x silently falls back from the
// transfer service to a local pull, and reads another concurrency key,
// when some CRI settings are set).
//
// Driver facts (toolkit drivers, minor-version floors, GPU brands and
// compute capabilities) come from package cuda, kiln's one CUDA/driver/GPU
// table; this package keeps no table of its own.
package hostcheck
