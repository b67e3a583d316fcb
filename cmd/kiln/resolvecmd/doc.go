// Package resolvecmd is kiln resolve: a recipe (or its lock) resolved by
// recipes into the plan it would build, printed with the age of the
// compatibility data it used.
//
// NewCmdResolve(f, runF): runF, when not nil, gets the parsed
// ResolveOptions instead of the resolve running.
package resolvecmd
