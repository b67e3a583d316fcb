// Package fatbin reads and prunes the GPU code that CUDA shared libraries
// carry in fat binaries.
//
// A fat binary (nvcc's .nv_fatbin section) is a container: a 16-byte header
// (magic 0xBA55ED50, version 1, header size, size of the entries) followed by
// entries, each with a header of its own (kind 1 PTX or 2 ELF cubin, header
// size, payload size, code version, architecture — 90 for sm_90 — and
// flags) and a payload that is often compressed. The CUDA runtime registers
// each container by a pointer to its header (the __fatBinC_Wrapper_t
// records in .nvFatBinSegment, relocated at load time) and the driver walks
// the entries the header's size covers, choosing a cubin for the GPU it
// runs on or JIT-compiling PTX.
//
// Invariants:
//   - Scanner reads a file as a stream, once, holding only the entry
//     headers it has seen and two bounded windows of the file (its first
//     64 KiB and the 64 KiB before the section header table, where the
//     section names live); nothing is decompressed.
//   - Prune never moves anything outside a container and never changes a
//     file's size: within a container the kept entries move, in their
//     original order, to the front, the header's size shrinks to cover
//     them, and the freed bytes become zeros (which cost nothing once the
//     layer is compressed). The registration records still point at the
//     same headers, so no relocation, symbol or section changes.
//   - Only containers the CUDA runtime registers (in .nv_fatbin, and in
//     __nv_relfatbin, an -rdc build's relocatable objects) and walked
//     exactly to their declared size are edited; containers a library keeps
//     in its own data (.data, .rodata) are never touched; entries of a kind
//     or with flags this package does not know are always kept.
//   - Select never leaves a fleet GPU without code a container had for it:
//     a container with nothing for one of the fleet's GPUs is kept whole.
//   - Same input and the same selection give the same bytes.
package fatbin
