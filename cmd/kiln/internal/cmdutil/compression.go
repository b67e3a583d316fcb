package cmdutil

import (
	"fmt"

	"github.com/google/go-containerregistry/pkg/name"

	"github.com/kiln-build/kiln/layers"
	"github.com/kiln-build/kiln/registry"
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

// ZstdDest is where the zstd variant of an image published at dest
// goes: REPO:TAG → REPO:TAG-zstd (the name kiln warm and kiln convert
// use), oci:DIR:TAG → oci:DIR:TAG-zstd. A registry digest reference has
// no tag to derive from; an untagged layout is tagged first (TagLayout).
func ZstdDest(dest string, lopts []registry.Option) (string, error) {
	return variantDest(dest, layers.ZstdTagSuffix, "zstd", "one --compression", lopts)
}

// ErofsDest is where the native EROFS variant of an image published at
// dest goes, as ZstdDest names the zstd one: REPO:TAG-erofs,
// oci:DIR:TAG-erofs (an untagged layout is tagged first: TagLayout).
func ErofsDest(dest string, lopts []registry.Option) (string, error) {
	return variantDest(dest, layers.ErofsTagSuffix, "EROFS", "convert it later with kiln convert --format erofs --to REF", lopts)
}

func variantDest(dest, suffix, what, or string, lopts []registry.Option) (string, error) {
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
		return layers.VariantTag(t, suffix).String(), nil
	case layers.KindOCILayout:
		if r.Tag == "" {
			return "", fmt.Errorf("%s: two encodings in one layout need a tag to tell them apart: oci:%s:TAG (%s goes to TAG%s), or %s", dest, r.Path, what, suffix, or)
		}
		return "oci:" + r.Path + ":" + r.Tag + suffix, nil
	}
	return "", fmt.Errorf("%s: a %s destination holds one encoding", dest, r.Kind)
}

// DefaultLayoutTag tags the images written to an untagged oci:DIR when
// there are two encodings (TAG and TAG-zstd): two untagged manifests in
// one index could not be told apart when read back.
const DefaultLayoutTag = "latest"

// TagLayout is dest with DefaultLayoutTag when it is an untagged OCI
// layout (oci:DIR → oci:DIR:latest), and dest otherwise.
func TagLayout(dest string, lopts []registry.Option) string {
	if r, err := layers.ParseRef(dest, lopts...); err == nil && r.Kind == layers.KindOCILayout && r.Tag == "" && r.Digest.Hex == "" {
		return "oci:" + r.Path + ":" + DefaultLayoutTag
	}
	return dest
}
