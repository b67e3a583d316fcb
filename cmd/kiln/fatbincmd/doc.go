// Package fatbincmd is kiln fatbin prune: shared libraries on disk
// rewritten in place with the GPU code a fleet runs (slim's fat-binary
// selection, fatbin's rewriting).
//
// NewCmdFatbin(f) wires NewCmdFatbinPrune(f, runF): runF, when not nil,
// gets the parsed FatbinOptions instead of the prune running.
package fatbincmd
