// Package lockcmd is kiln lock: a recipe resolved and pinned (base image
// digests per platform, wheel hashes) into kiln.lock by recipes, or with
// --check the lock compared with the recipe, offline.
//
// NewCmdLock(f, runF): runF, when not nil, gets the parsed LockOptions
// instead of the lock being written.
package lockcmd
