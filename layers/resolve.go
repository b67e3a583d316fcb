package layers

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/kiln-build/kiln/internal/localfile"
	"github.com/kiln-build/kiln/layers/blob"
)

// The one walk from a reference to an image's verified bytes, shared by
// Open, kiln warm's set and the weights sources:
//
//   - an OCI layout's index.json is read by LayoutEntries, under one tag
//     rule (MatchesTag), and its blobs through blob.Layout (one digest
//     guard, blob.CheckDigest) and blob.ReadVerified (digest and size
//     against the descriptor);
//   - an index is walked for a platform by PlatformCandidates (one
//     platform rule, PlatformMatches);
//   - an image without a manifest (a docker archive, a docker-daemon
//     image) gets the one manifest ArchiveManifest writes.

// LayoutEntries reads the index.json of the layout r names and returns
// the entries r selects: by digest (oci:DIR@sha256:…), by tag (MatchesTag:
// the ref.name or containerd name is the tag or ends in :tag), or, with
// neither, every entry; and the names the layout's entries record
// (EntryName), sorted, for the errors of its callers. An empty selection
// is an error in words.
func LayoutEntries(r Ref) (sel []v1.Descriptor, names []string, err error) {
	b, err := localfile.ReadFile(filepath.Join(r.Path, "index.json"), "index.json", localfile.MaxIndex)
	if err != nil {
		if os.IsNotExist(err) {
			return nil, nil, fmt.Errorf("image %q: %s is not an OCI image layout (no index.json)", r.Raw, r.Path)
		}
		return nil, nil, fmt.Errorf("image %q: %v", r.Raw, err)
	}
	var idx v1.IndexManifest
	if err := json.Unmarshal(b, &idx); err != nil {
		return nil, nil, fmt.Errorf("image %q: %s: %v", r.Raw, filepath.Join(r.Path, "index.json"), err)
	}
	for _, d := range idx.Manifests {
		if n := EntryName(d); n != "" {
			names = append(names, n)
		}
		if r.Digest.Hex != "" && d.Digest == r.Digest || r.Digest.Hex == "" && MatchesTag(d.Annotations, r.Tag) {
			sel = append(sel, d)
		}
	}
	sort.Strings(names)
	switch {
	case len(sel) > 0:
		return sel, names, nil
	case r.Digest.Hex != "":
		return nil, names, fmt.Errorf("image %q: index.json of %s has no manifest %s", r.Raw, r.Path, r.Digest)
	case r.Tag != "":
		return nil, names, fmt.Errorf("image %q: no image tagged %q in %s (it names: %s)", r.Raw, r.Tag, r.Path, strings.Join(names, ", "))
	}
	return nil, names, fmt.Errorf("image %q: the layout %s holds no images (index.json field manifests)", r.Raw, r.Path)
}

// EntryName is the image name a layout's index.json entry records:
// containerd's (io.containerd.image.name), else the OCI ref.name.
func EntryName(d v1.Descriptor) string {
	if n := d.Annotations[AnnotationContainerdName]; n != "" {
		return n
	}
	return d.Annotations[refNameAnnotation]
}

// PlatformCandidates is kiln's one walk of an index for a platform: the
// image manifests it lists for p (PlatformMatches), in index order (the
// first is what a pull installs), and the platforms it offers (for the
// error that lists them; nil for an entry without one). Nested indexes
// and attestation manifests are never candidates.
func PlatformCandidates(im *v1.IndexManifest, p v1.Platform) (cands []v1.Descriptor, offered []*v1.Platform) {
	for _, d := range im.Manifests {
		if !d.MediaType.IsImage() {
			continue
		}
		offered = append(offered, d.Platform)
		if platformMatches(p, d.Platform) {
			cands = append(cands, d)
		}
	}
	return cands, offered
}

// NoPlatformError is the error for an index without p: what it has, and
// how to choose.
func NoPlatformError(raw string, p v1.Platform, offered []*v1.Platform) error {
	return fmt.Errorf("image %q: no image for platform %s in the index (it has: %s); choose one with --platform", raw, PlatformString(p), platformList(offered))
}

// ArchiveManifest is the one manifest kiln writes for an image that has
// none (a docker archive, a docker-daemon image), as containerd's import
// does: an OCI manifest over the config and the layers as stored (a plain
// tar layer is the blob its diff ID names; a compressed one, whose digest
// the archive does not record, is hashed here once), and the sections of
// the source file that serve those blobs, config included.
func (img *Image) ArchiveManifest() ([]byte, blob.Sections, error) {
	secs := blob.Sections{}
	cdg := sha256Hash(img.RawConfig)
	secs[cdg] = blob.Section{R: strings.NewReader(string(img.RawConfig)), Size: int64(len(img.RawConfig))}
	m := v1.Manifest{
		SchemaVersion: 2,
		MediaType:     types.OCIManifestSchema1,
		Config:        v1.Descriptor{MediaType: types.OCIConfigJSON, Digest: cdg, Size: int64(len(img.RawConfig))},
	}
	for _, l := range img.Layers {
		if l.file == nil {
			return nil, nil, fmt.Errorf("image %q: layer %d is not stored in the archive", img.Ref.Raw, l.Index)
		}
		dg, err := l.blobDigest()
		if err != nil {
			return nil, nil, fmt.Errorf("image %q: layer %d: %v", img.Ref.Raw, l.Index, err)
		}
		mt := types.OCIUncompressedLayer
		switch l.MediaType {
		case types.DockerLayer, types.OCILayer:
			mt = types.OCILayer
		case types.OCILayerZStd:
			mt = types.OCILayerZStd
		}
		secs[dg] = blob.Section{R: l.file, Off: l.off, Size: l.Size}
		m.Layers = append(m.Layers, v1.Descriptor{MediaType: mt, Digest: dg, Size: l.Size})
	}
	raw, err := json.Marshal(m)
	if err != nil {
		return nil, nil, err
	}
	return raw, secs, nil
}

// blobDigest is the layer's blob digest; a docker archive's compressed
// layer has none recorded, so its section is hashed (as docker load does).
func (l *Layer) blobDigest() (v1.Hash, error) {
	if l.Digest.Hex != "" {
		return l.Digest, nil
	}
	if l.file == nil {
		return v1.Hash{}, fmt.Errorf("no blob digest")
	}
	h := sha256.New()
	if _, err := io.Copy(h, io.NewSectionReader(l.file, l.off, l.Size)); err != nil {
		return v1.Hash{}, err
	}
	return v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(h.Sum(nil))}, nil
}

func sha256Hash(b []byte) v1.Hash {
	s := sha256.Sum256(b)
	return v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(s[:])}
}
