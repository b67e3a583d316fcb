package layers

import (
	"fmt"

	"github.com/google/go-containerregistry/pkg/name"

	"github.com/kiln-build/kiln/registry"
)

// ZstdDest is where the zstd variant of an image published at dest
// goes: REPO:TAG → REPO:TAG-zstd (the name kiln warm and kiln convert
// use), oci:DIR:TAG → oci:DIR:TAG-zstd. A registry digest reference has
// no tag to derive from; an untagged layout is tagged first (cmdutil.TagLayout).
func ZstdDest(dest string, lopts []registry.Option) (string, error) {
	return variantDest(dest, ZstdTagSuffix, "zstd", "one --compression", lopts)
}

// ErofsDest is where the native EROFS variant of an image published at
// dest goes, as ZstdDest names the zstd one: REPO:TAG-erofs,
// oci:DIR:TAG-erofs (an untagged layout is tagged first: cmdutil.TagLayout).
func ErofsDest(dest string, lopts []registry.Option) (string, error) {
	return variantDest(dest, ErofsTagSuffix, "EROFS", "convert it later with kiln convert --format erofs --to REF", lopts)
}

func variantDest(dest, suffix, what, or string, lopts []registry.Option) (string, error) {
	r, err := ParseRef(dest, lopts...)
	if err != nil {
		return "", err
	}
	switch r.Kind {
	case KindRegistry:
		t, ok := r.Name.(name.Tag)
		if !ok {
			return "", fmt.Errorf("%s names a digest: give a tag (REPO:TAG) for the %s variant's REPO:TAG%s, or %s", dest, what, suffix, or)
		}
		return VariantTag(t, suffix).String(), nil
	case KindOCILayout:
		if r.Tag == "" {
			return "", fmt.Errorf("%s: two encodings in one layout need a tag to tell them apart: oci:%s:TAG (%s goes to TAG%s), or %s", dest, r.Path, what, suffix, or)
		}
		return "oci:" + r.Path + ":" + r.Tag + suffix, nil
	}
	return "", fmt.Errorf("%s: a %s destination holds one encoding", dest, r.Kind)
}
