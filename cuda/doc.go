// Package cuda is kiln's vocabulary of CUDA, driver and GPU facts: the
// dotted Version every CUDA, driver and compute-capability number is
// compared as, NVIDIA's minimum driver per toolkit (MinDriver, DriverCUDA),
// the NVIDIA_REQUIRE_CUDA rules of the nvidia/cuda images and the DSL
// libnvidia-container evaluates them with (ParseRequireCUDA, Satisfied),
// whether an image runs on a host driver (CheckDriver), and the GPU table
// with the toolkits that compile for each architecture (GPU, ArchSupported,
// Covers). analyze, hostcheck, slim, builder and recipes read these facts
// here; recipe schema and resolution stay in package recipes, which
// imports this one and never the reverse.
//
// Invariants:
//   - The facts are embedded (data/drivers.json, data/gpus.json), loaded
//     once, and never change at run time: `kiln compat refresh` and
//     --compat-data replace only recipes' torch and image facts, so a
//     driver or GPU answer depends on the kiln binary alone.
//   - Every row carries its source and a confidence grade (ConfA …
//     ConfUnverified, as in shared/reference/compat-data.md), and every
//     answer that rests on a row passes them on (DriverReq.Source,
//     DriverVerdict.Sources), so a report can say why it believes a fact.
//     An answer kiln infers beyond its rows (an unlisted CUDA update)
//     says so and is graded ConfC.
//   - Versions compare numerically with missing components as zero, the
//     way libnvidia-container compares them; NVIDIA_REQUIRE_CUDA is
//     evaluated as libnvidia-container evaluates it (an unknown host value
//     never satisfies a rule; with no GPU visible, arch and brand rules
//     hold), so kiln refuses what a container start would refuse and
//     nothing more.
//   - The data is released as one set with recipes' files: DataVersion is
//     the version plans and locks record.
package cuda
