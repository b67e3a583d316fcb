// Package buildcmd is kiln build: a recipe (or its lock) to a plan and
// builder inputs, the destinations and caches checked before the build,
// then builder.Build on the BuildKit daemon the Factory dials, and after
// it the SBOM referrers and --sign-key signatures of what BuildKit pushed
// (through publish), the --check rules and the report. The build graph,
// exports and solve live in builder; recipes resolve and lock.
//
// NewCmdBuild(f, runF): runF, when not nil, gets the parsed BuildOptions
// instead of the build running.
package buildcmd
