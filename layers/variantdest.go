package layers

import (
	"fmt"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
)

// ZstdDest is where the zstd variant of an image published at dest
// goes: REPO:TAG → REPO:TAG-zstd (the name kiln warm and kiln convert
// use), oci:DIR:TAG → oci:DIR:TAG-zstd. A registry digest reference has
// no tag to derive from; an untagged layout is tagged first
// (Ref.WithLayoutTag).
func ZstdDest(dest Ref) (Ref, error) {
	return dest.variant(ZstdTagSuffix, "zstd", "one --compression")
}

// ErofsDest is where the native EROFS variant of an image published at
// dest goes, as ZstdDest names the zstd one: REPO:TAG-erofs,
// oci:DIR:TAG-erofs (an untagged layout is tagged first:
// Ref.WithLayoutTag).
func ErofsDest(dest Ref) (Ref, error) {
	return dest.variant(ErofsTagSuffix, "EROFS", "convert it later with kiln convert --format erofs --to REF")
}

// Variant is the reference of r's variant named by suffix, published
// beside it: REPO:TAG → REPO:TAG-SUFFIX, oci:DIR:TAG → oci:DIR:TAG-SUFFIX.
// A digest reference, an untagged layout and an archive have none.
func (r Ref) Variant(suffix string) (Ref, error) {
	return r.variant(suffix, strings.TrimPrefix(suffix, "-"), "name a tag")
}

func (r Ref) variant(suffix, what, or string) (Ref, error) {
	switch r.Kind {
	case KindRegistry:
		t, ok := r.Name.(name.Tag)
		if !ok {
			return Ref{}, fmt.Errorf("%s names a digest: give a tag (REPO:TAG) for the %s variant's REPO:TAG%s, or %s", r, what, suffix, or)
		}
		v := VariantTag(t, suffix)
		return Ref{Kind: KindRegistry, Raw: v.String(), Name: v}, nil
	case KindOCILayout:
		if r.Tag == "" || r.Digest.Hex != "" {
			return Ref{}, fmt.Errorf("%s: two encodings in one layout need a tag to tell them apart: oci:%s:TAG (%s goes to TAG%s), or %s", r, r.Path, what, suffix, or)
		}
		return Ref{Kind: KindOCILayout, Raw: "oci:" + r.Path + ":" + r.Tag + suffix, Path: r.Path, Tag: r.Tag + suffix}, nil
	}
	return Ref{}, fmt.Errorf("%s: a %s destination holds one encoding", r, r.Kind)
}

// WithLayoutTag is r with tag naming its image when r is an OCI layout
// that names none (oci:DIR → oci:DIR:tag): where two encodings are written
// into one layout, each needs a name. Other references are returned as
// they are.
func (r Ref) WithLayoutTag(tag string) Ref {
	if r.Kind != KindOCILayout || r.Tag != "" || r.Digest.Hex != "" {
		return r
	}
	return Ref{Kind: KindOCILayout, Raw: "oci:" + r.Path + ":" + tag, Path: r.Path, Tag: tag}
}
