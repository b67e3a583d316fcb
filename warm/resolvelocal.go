package warm

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/kiln-build/kiln/layers"
	"github.com/kiln-build/kiln/layers/blob"
	"github.com/kiln-build/kiln/registry"
	"github.com/kiln-build/kiln/weights"
)

// A warm set read from local sources: an OCI layout (kiln warm's own oci:
// target is the persistent image cache of a spot fleet: warm it once,
// then warm each relaunched host's store from it at disk speed) or a
// docker archive. The blobs are read, verified and committed exactly as
// registry blobs are; only the Source differs.

// resolveLayout reads the images of an OCI layout that r selects: by
// digest (oci:DIR@sha256:…), by tag (the ref.name or containerd name is
// the tag or ends in :tag), or, with neither, every image the layout
// names. Each is named as its index.json entry names it (containerd's
// name, else ref.name), so an image cached by kiln warm is recorded
// under its registry reference again.
func resolveLayout(ctx context.Context, ref string, r layers.Ref, o ResolveOptions) (*resolved, error) {
	src := blob.Layout{Dir: r.Path}
	picks, _, err := layers.LayoutEntries(r)
	if err != nil {
		return nil, err
	}
	abs, _ := filepath.Abs(r.Path)
	w := walker{ref: ref, src: src}
	out := &resolved{}
	for i, d := range picks {
		root, err := readLayoutManifest(ctx, src, d)
		if err != nil {
			return nil, fmt.Errorf("image %q: index.json manifests[%d]: %v", ref, i, err)
		}
		name, err := layoutImageName(ref, r, layers.EntryName(d))
		if err != nil {
			return nil, err
		}
		img := Image{Name: name, Source: "oci:" + abs + "@" + d.Digest.String()}
		im, blobs, err := w.image(ctx, img, root, o)
		if errors.Is(err, errWeightsArtifact) {
			// A weights artifact cached beside the images: warmed as a
			// volume (--weights-into), as a registry one would be,
			// resolved from the manifest just read.
			res, err := weights.FromArtifact(ctx, img.Source, root.raw, src)
			if err != nil {
				return nil, err
			}
			out.weights = append(out.weights, img.Source)
			if out.volumes == nil {
				out.volumes = map[string]*Volume{}
			}
			out.volumes[img.Source] = &Volume{Ref: img.Source, Resolved: res}
			continue
		}
		if err != nil {
			return nil, err
		}
		out.images = append(out.images, im)
		out.blobs = append(out.blobs, blobs...)
	}
	return out, nil
}

// The name a local image is recorded under in a store (containerd's image
// name, a layout's ref.name) comes from a file anyone may have written, so
// it is checked by kiln's one rule for image names (registry.NormalizeName)
// and written in full: a name with a newline, ';' or '../' is refused, and
// a bare tag ("latest", "1": the OCI ref.name of skopeo's and crane's
// layouts, a docker-archive:FILE:TAG selection) never becomes the name.

// layoutImageName is layers.LayoutImageName, the error naming ref.
func layoutImageName(ref string, r layers.Ref, entry string) (string, error) {
	n, err := layers.LayoutImageName(r.Path, entry)
	if err != nil {
		return "", fmt.Errorf("image %q: %v", ref, err)
	}
	return n, nil
}

// archiveImageName names a docker archive's image: the RepoTag the user
// selected (a bare tag selects the RepoTag ending in it), else the first;
// a docker-daemon: image by the name asked for.
func archiveImageName(ref string, r layers.Ref, names []string) (string, error) {
	name := ""
	switch {
	case r.Kind == layers.KindDaemon:
		name = r.Tag
	case r.Tag != "" && layers.BareTag(r.Tag):
		for _, n := range names {
			if strings.HasSuffix(n, ":"+r.Tag) {
				name = n
				break
			}
		}
	case r.Tag != "":
		name = r.Tag
	case len(names) > 0:
		name = names[0]
	}
	if name == "" {
		return "", fmt.Errorf("image %q: the archive names no image (manifest.json field RepoTags is empty); kiln warm records images by name", ref)
	}
	n, err := registry.NormalizeName(name)
	if err != nil {
		return "", fmt.Errorf("image %q: the archive names the image %q (manifest.json field RepoTags), which is not an image name: %v", ref, name, err)
	}
	return n, nil
}

// readLayoutManifest reads and verifies a layout's index.json entry; the
// descriptor loses its annotations (they name the entry, not the content).
func readLayoutManifest(ctx context.Context, src blob.Layout, d v1.Descriptor) (*fetched, error) {
	raw, err := layers.ReadManifest(ctx, src, d)
	if err != nil {
		return nil, err
	}
	od := ociDescriptor(d)
	od.Annotations = nil
	return &fetched{desc: od, raw: raw}, nil
}

// resolveArchive reads the image of a docker archive (docker save, kiln
// slim --to docker-archive:). An archive has no manifest: it gets the one
// every kiln reader makes for it (layers.ArchiveManifest). The archive
// stays open until the set is closed.
func resolveArchive(ctx context.Context, ref string, r layers.Ref, o ResolveOptions) (*resolved, error) {
	li, err := layers.Open(ctx, r, o.Layers...)
	if err != nil {
		return nil, err
	}
	ok := false
	defer func() {
		if !ok {
			li.Close()
		}
	}()
	name, err := archiveImageName(ref, r, li.Names)
	if err != nil {
		return nil, err
	}
	// The one manifest kiln writes for an image without one, over the
	// archive's sections.
	raw, secs, err := li.ArchiveManifest()
	if err != nil {
		return nil, err
	}
	root := &fetched{raw: raw, desc: ocispec.Descriptor{MediaType: ocispec.MediaTypeImageManifest, Digest: digest.FromBytes(raw), Size: int64(len(raw))}}
	abs, _ := filepath.Abs(r.Path)
	img := Image{Name: name, Source: "docker-archive:" + abs}
	if r.Kind == layers.KindDaemon {
		img.Source = r.Raw
	}
	w := walker{ref: ref, src: secs}
	im, blobs, err := w.image(ctx, img, root, o)
	if err != nil {
		return nil, err
	}
	ok = true
	return &resolved{images: []Image{im}, blobs: blobs, closer: li}, nil
}
