package layers

import (
	"encoding/json"
	"fmt"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
)

// NameErofsForm is img naming erofs, the manifest digest of its native
// EROFS form, in its manifest's annotations (AnnotationErofsManifest).
// A tag beside another (REPO:TAG-erofs) is a claim anyone who can push
// can make; this is the proof kiln warm asks for: the EROFS form is
// written first, then TAG, whose manifest (signed with it) names it.
func NameErofsForm(img v1.Image, erofs v1.Hash) v1.Image {
	return mutate.Annotations(img, map[string]string{AnnotationErofsManifest: erofs.String()}).(v1.Image)
}

// ErofsFormNamed is the EROFS form's manifest digest an image manifest
// names (NameErofsForm): "" when it names none.
func ErofsFormNamed(manifest []byte) (string, error) {
	var m struct {
		Annotations map[string]string `json:"annotations"`
	}
	if err := json.Unmarshal(manifest, &m); err != nil {
		return "", fmt.Errorf("manifest: %v", err)
	}
	return m.Annotations[AnnotationErofsManifest], nil
}
