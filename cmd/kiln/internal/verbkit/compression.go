package verbkit

import (
	"fmt"

	"github.com/kiln-build/kiln/layers"
)

// CompressionHelp is the --compression text kiln slim and kiln build share.
const CompressionHelp = "layer compression: both (gzip under TAG for every runtime, zstd under TAG" + layers.ZstdTagSuffix + " for Docker >= 23.0 / containerd >= 1.5 and kiln warm), gzip, or zstd"

// ParseCompression reads --compression: the encodings to publish, the
// first under the destination's own name.
func ParseCompression(s string) ([]layers.Compression, error) {
	switch s {
	case "both":
		// gzip first: the plain name is what a platform that pulls the
		// image itself gets, and every Docker and containerd pulls gzip.
		return []layers.Compression{layers.Gzip, layers.Zstd}, nil
	case "gzip":
		return []layers.Compression{layers.Gzip}, nil
	case "zstd":
		return []layers.Compression{layers.Zstd}, nil
	}
	return nil, fmt.Errorf("%q is not one of both, gzip, zstd", s)
}

// DefaultLayoutTag tags the images written to an untagged oci:DIR when
// there are two encodings (TAG and TAG-zstd; Ref.WithLayoutTag): two
// untagged manifests in one index could not be told apart when read back.
const DefaultLayoutTag = "latest"
