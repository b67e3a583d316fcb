// Package warmcmd is kiln warm and kiln warm status: images, locks and
// weights volumes put into a host's image store (the engine is warm; the
// target is opened through the Factory), or with --hosts on a fleet
// (warm/fleet), and the readiness report printed.
//
// NewCmdWarm(f, runF): runF, when not nil, gets the parsed WarmOptions
// instead of the warm (or the fleet) running.
package warmcmd
