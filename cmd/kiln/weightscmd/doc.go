// Package weightscmd is kiln weights: strip (weights.Strip: the image
// rewritten without its weights, the weights artifact, its image twin,
// SBOM and signatures), pull and verify a volume (weights), and the
// run-args a container needs to mount it.
//
// NewCmdWeights(f) wires NewCmdWeightsStrip, NewCmdWeightsPull,
// NewCmdWeightsVerify and NewCmdWeightsRunArgs, each (f, runF): runF, when
// not nil, gets the parsed options instead of the command running.
package weightscmd
