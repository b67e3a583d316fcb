// Package convertcmd is kiln convert: an image's layers recompressed as
// zstd (or laid out as eStargz) by convert, written to --to (by default
// REPO:TAG-zstd, layers.VariantTag) and signed through publish.
//
// NewCmdConvert(f, runF): runF, when not nil, gets the parsed
// ConvertOptions instead of the conversion running.
package convertcmd
