// Package recipes turns a recipe (a pinned CUDA stack: CUDA, cuDNN,
// PyTorch, FlashAttention, bitsandbytes, the GPUs to compile for, the app)
// into a Plan resolved against kiln's compatibility database, and keeps
// that plan in a lock file.
//
// Invariants:
//   - Resolution is pure given its inputs (the recipe, the data, the wheel
//     indexes and the registry digests it asks for): the same inputs give
//     the same Plan, byte for byte, and Lock.Stale says why a lock no longer
//     matches, from local data only.
//   - Every choice the resolver makes is explained (Plan notes) and every
//     refusal names the recipe file, the field and the rule it broke
//     (FieldError), never only a value.
//   - The compatibility data of the stack (data.go, datafile.go: nvidia/cuda
//     image tags and OS flavours, torch, FlashAttention and bitsandbytes
//     pairings) is one source, with its age; `kiln compat refresh` replaces
//     its torch and image facts atomically. The CUDA, driver and GPU facts
//     the resolver checks against are package cuda's (embedded, never
//     refreshed), which is what analyze, hostcheck and slim import instead
//     of this package.
//   - A lock file is read only through ReadLock or DecodeLock (its version
//     and unknown fields checked); localfile.ReadArg is the one rule that
//     tells a lock from an image reference, and RuntimeRefs the images a GPU
//     host runs.
package recipes
