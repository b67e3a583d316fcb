package cmdutil

import (
	"fmt"

	"github.com/google/go-containerregistry/pkg/name"

	"github.com/kiln-build/kiln/layers"
	"github.com/kiln-build/kiln/warm"
)

// CompressionHelp is the --compression text kiln slim and kiln build share.
const CompressionHelp = "layer compression: both (gzip under TAG for every runtime, zstd under TAG" + warm.ZstdTagSuffix + " for Docker >= 23.0 / containerd >= 1.5 and kiln warm), gzip, or zstd"

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

// ZstdDest is where the zstd variant of an image published at dest
// goes: REPO:TAG → REPO:TAG-zstd (the name kiln warm and kiln convert
// use), oci:DIR:TAG → oci:DIR:TAG-zstd, oci:DIR → oci:DIR (added beside
// it, untagged). A registry digest reference has no tag to derive from.
func ZstdDest(dest string, lopts []layers.Option) (string, error) {
	return variantDest(dest, warm.ZstdTagSuffix, "zstd", "one --compression", lopts)
}

// ErofsDest is where the native EROFS variant of an image published at
// dest goes, as ZstdDest names the zstd one: REPO:TAG-erofs.
func ErofsDest(dest string, lopts []layers.Option) (string, error) {
	return variantDest(dest, layers.ErofsTagSuffix, "EROFS", "convert it later with kiln convert --format erofs --to REF", lopts)
}

func variantDest(dest, suffix, what, or string, lopts []layers.Option) (string, error) {
	r, err := layers.ParseRef(dest, lopts...)
	if err != nil {
		return "", err
	}
	switch r.Kind {
	case layers.KindRegistry:
		t, ok := r.Name.(name.Tag)
		if !ok {
			return "", fmt.Errorf("%s names a digest: give a tag (REPO:TAG) for the %s variant's REPO:TAG%s, or %s", dest, what, suffix, or)
		}
		return t.Context().Tag(t.TagStr() + suffix).String(), nil
	case layers.KindOCILayout:
		if r.Tag == "" {
			return dest, nil
		}
		return "oci:" + r.Path + ":" + r.Tag + suffix, nil
	}
	return "", fmt.Errorf("%s: a %s destination holds one encoding", dest, r.Kind)
}
