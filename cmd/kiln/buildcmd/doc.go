// Package buildcmd is kiln build: its flags into builder.Flags and the
// recipe (or its lock) into a plan and builder inputs, then builder.Run
// (the content tag's answer or the solve on the BuildKit daemon the
// Factory dials, the content tag, the EROFS variant, SBOMs, signatures,
// --check and --explain), then the report. --dry-run and --dockerfile
// stop before the build.
//
// NewCmdBuild(f, runF): runF, when not nil, gets the parsed BuildOptions
// instead of the build running.
package buildcmd
