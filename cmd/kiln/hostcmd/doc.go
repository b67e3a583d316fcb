// Package hostcmd is kiln host check: what a GPU host has (hostcheck
// gathers it), checked against an image, a recipe or a lock, and with
// --image a registry image's signatures and attestations (sign.Inspect).
//
// NewCmdHost(f) wires NewCmdHostCheck(f, runF): runF, when not nil, gets
// the parsed HostCheckOptions instead of the check running.
package hostcmd
