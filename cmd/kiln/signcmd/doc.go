// Package signcmd is kiln sign and kiln verify: a registry image signed
// with a key (sign.Sign), or verified under a key or policy
// (sign.Policy.VerifyRef), each with one JSON object on --json.
//
// NewCmdSign(f, runF) and NewCmdVerify(f, runF): runF, when not nil, gets
// the parsed options instead of the command running.
package signcmd
