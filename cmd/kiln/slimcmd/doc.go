// Package slimcmd is kiln slim: the flags checked, the destinations,
// BuildKit (for --probe, dialled through the Factory) and the work
// directory checked before the rewrite, slim.Rewrite, the weights volume
// (weights.Collector), then slim.Publish (probe, eStargz, write, SBOM,
// sign) and the report. The workflow lives in slim; the verb parses and
// prints.
//
// NewCmdSlim(f, runF): runF, when not nil, gets the parsed SlimOptions
// instead of the slim running.
package slimcmd
