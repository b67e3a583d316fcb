package layers

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/kiln-build/kiln/internal/localfile"
	"github.com/kiln-build/kiln/registry"
)

const refNameAnnotation = "org.opencontainers.image.ref.name"

// layoutDir reads blobs of an OCI image layout, verifying small ones as they
// are read and handing out file-backed large ones.
type layoutDir struct {
	ref Ref
	dir string
}

func (l layoutDir) blobPath(h v1.Hash) string {
	return filepath.Join(l.dir, "blobs", h.Algorithm, h.Hex)
}

// small reads a manifest, index or config blob fully and verifies it. These
// are kilobytes; layers never go through here.
func (l layoutDir) small(h v1.Hash, what string) ([]byte, error) {
	if h.Algorithm == "" || strings.ContainsAny(h.Hex, "/\\.") {
		return nil, fmt.Errorf("image %q: %s: bad digest %q", l.ref.Raw, what, h)
	}
	f, err := localfile.Open(l.blobPath(h), what)
	if err != nil {
		return nil, fmt.Errorf("image %q: %s %s: %v", l.ref.Raw, what, h, err)
	}
	defer f.Close()
	const max = 64 << 20
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, fmt.Errorf("image %q: %s %s: %v", l.ref.Raw, what, h, err)
	}
	if len(b) > max {
		return nil, fmt.Errorf("image %q: %s %s: larger than %d bytes", l.ref.Raw, what, h, max)
	}
	if err := checkBlobDigest(b, h); err != nil {
		return nil, fmt.Errorf("image %q: %s: %v", l.ref.Raw, what, err)
	}
	return b, nil
}

// Annotations that name an image in a layout: the OCI tag, and the full
// reference containerd's import and kiln warm's oci: target record.
const (
	AnnotationRefName        = refNameAnnotation
	AnnotationContainerdName = "io.containerd.image.name"
)

// MatchesTag says whether a layout index entry with these annotations is
// the one tag selects: its ref.name is the tag or ends in ":tag", or its
// containerd name is the tag or ends in ":tag". An empty tag selects
// every entry.
func MatchesTag(ann map[string]string, tag string) bool {
	if tag == "" {
		return true
	}
	for _, k := range []string{refNameAnnotation, AnnotationContainerdName} {
		if n := ann[k]; n != "" && (n == tag || strings.HasSuffix(n, ":"+tag)) {
			return true
		}
	}
	return false
}

func openLayout(r Ref, o *registry.Options) (*Image, error) {
	ld := layoutDir{ref: r, dir: r.Path}
	b, err := localfile.ReadFile(filepath.Join(r.Path, "index.json"), "index.json", localfile.MaxIndex)
	if err != nil {
		if os.IsNotExist(err) {
			return nil, fmt.Errorf("image %q: %s is not an OCI image layout (no index.json)", r.Raw, r.Path)
		}
		return nil, fmt.Errorf("image %q: %v", r.Raw, err)
	}
	var idx v1.IndexManifest
	if err := json.Unmarshal(b, &idx); err != nil {
		return nil, fmt.Errorf("image %q: index.json: %v", r.Raw, err)
	}
	var cands []v1.Descriptor
	var names []string
	for _, d := range idx.Manifests {
		n := d.Annotations[refNameAnnotation]
		if n != "" {
			names = append(names, n)
		}
		if r.Digest.Hex != "" {
			if d.Digest == r.Digest {
				cands = append(cands, d)
			}
			continue
		}
		if MatchesTag(d.Annotations, r.Tag) {
			cands = append(cands, d)
		}
	}
	sort.Strings(names)
	switch {
	case len(cands) == 0 && r.Digest.Hex != "":
		return nil, fmt.Errorf("image %q: index.json of %s has no manifest %s", r.Raw, r.Path, r.Digest)
	case len(cands) == 0 && r.Tag != "":
		return nil, fmt.Errorf("image %q: no image tagged %q in %s (tags: %s)", r.Raw, r.Tag, r.Path, strings.Join(names, ", "))
	case len(cands) == 0:
		return nil, fmt.Errorf("image %q: the layout holds no images", r.Raw)
	case len(cands) > 1:
		return nil, fmt.Errorf("image %q: the layout holds %d images; name one as oci:%s:TAG (tags: %s)", r.Raw, len(cands), r.Path, strings.Join(names, ", "))
	}
	desc := cands[0]
	// Descend through nested indexes to the platform's manifest.
	for depth := 0; desc.MediaType.IsIndex(); depth++ {
		if depth > 4 {
			return nil, fmt.Errorf("image %q: indexes nested too deep", r.Raw)
		}
		raw, err := ld.small(desc.Digest, "index")
		if err != nil {
			return nil, err
		}
		var sub v1.IndexManifest
		if err := json.Unmarshal(raw, &sub); err != nil {
			return nil, fmt.Errorf("image %q: index %s: %v", r.Raw, desc.Digest, err)
		}
		var seen []*v1.Platform
		found := false
		for _, d := range sub.Manifests {
			if d.MediaType.IsIndex() && d.Platform == nil {
				desc, found = d, true
				break
			}
			seen = append(seen, d.Platform)
			if platformMatches(o.Platform, d.Platform) {
				desc, found = d, true
				break
			}
		}
		if !found {
			return nil, fmt.Errorf("image %q: no image for platform %s (it has: %s); choose one with --platform", r.Raw, PlatformString(o.Platform), platformList(seen))
		}
	}
	if !desc.MediaType.IsImage() {
		return nil, fmt.Errorf("image %q: descriptor %s has media type %q, not an image manifest", r.Raw, desc.Digest, desc.MediaType)
	}
	raw, err := ld.small(desc.Digest, "manifest")
	if err != nil {
		return nil, err
	}
	var m v1.Manifest
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, fmt.Errorf("image %q: manifest %s: %v", r.Raw, desc.Digest, err)
	}
	rawCfg, err := ld.small(m.Config.Digest, "config")
	if err != nil {
		return nil, err
	}
	cfg, err := parseConfig(rawCfg)
	if err != nil {
		return nil, fmt.Errorf("image %q: config %s: %v", r.Raw, m.Config.Digest, err)
	}
	img := &Image{Ref: r, Digest: desc.Digest, MediaType: desc.MediaType, Config: cfg, RawConfig: rawCfg, RawManifest: raw}
	img.Platform = v1.Platform{OS: cfg.OS, Architecture: cfg.Architecture, Variant: cfg.Variant}
	// Layer files are opened on their first read, a bounded number at
	// once (blobFiles); here they are only checked.
	files := newBlobFiles()
	img.closers = append(img.closers, files)
	for _, d := range m.Layers {
		p := ld.blobPath(d.Digest)
		if strings.ContainsAny(d.Digest.Hex, "/\\.") {
			img.Close()
			return nil, fmt.Errorf("image %q: layer digest %q is malformed", r.Raw, d.Digest)
		}
		fi, err := os.Stat(p)
		if err == nil && !fi.Mode().IsRegular() {
			err = fmt.Errorf("not a regular file")
		}
		if err != nil {
			img.Close()
			return nil, fmt.Errorf("image %q: layer %s: %v", r.Raw, d.Digest, err)
		}
		if fi.Size() != d.Size {
			img.Close()
			return nil, fmt.Errorf("image %q: layer %s: %v: file has %d bytes, manifest says %d", r.Raw, d.Digest, ErrSizeMismatch, fi.Size(), d.Size)
		}
		img.Layers = append(img.Layers, &Layer{Digest: d.Digest, MediaType: d.MediaType, Size: d.Size, file: files.file(p)})
	}
	if err := checkLayersAgainstConfig(r, cfg, img.Layers); err != nil {
		img.Close()
		return nil, err
	}
	return img, nil
}
