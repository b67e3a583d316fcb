// Package compatcmd is kiln compat: driver and gpu answer from the
// compatibility data (cuda), refresh rewrites that data from the torch
// wheel index and NVIDIA's matrix (cuda/refresh).
//
// NewCmdCompat(f) wires NewCmdCompatDriver, NewCmdCompatGPU and
// NewCmdCompatRefresh, each (f, runF): runF, when not nil, gets the parsed
// options instead of the command running.
package compatcmd
