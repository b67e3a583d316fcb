package weights

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/kiln-build/kiln/internal/localfile"
	"github.com/kiln-build/kiln/layers"
	"github.com/kiln-build/kiln/layers/blob"
	"github.com/kiln-build/kiln/registry"
)

// Resolved is a volume manifest and where its blobs come from.
type Resolved struct {
	Manifest *Manifest
	Source   blob.Source
	// Ref is the artifact, by digest, when resolved from one.
	Ref string
	// Image is the application image when ref named one whose
	// dev.kiln.weights.manifest label led to the artifact.
	Image string
}

// Resolve turns what the user typed into a manifest and a blob source:
//
//	REGISTRY/REPO[:TAG|@DIGEST]    a weights artifact in a registry
//	oci:DIR[:TAG] | oci:DIR@DIGEST a weights artifact in an OCI layout
//	FILE.json                      a volume manifest; blobs come from its
//	                               "repository" (or from, when set); with
//	                               neither, Source is nil
//
// from overrides where blobs are fetched (a mirror holding the same blobs).
func Resolve(ctx context.Context, ref, from string, opts ...registry.Option) (*Resolved, error) {
	var res *Resolved
	af, err := localfile.ReadArg(ref, maxManifestBytes)
	switch {
	case err != nil:
		return nil, err
	case af != nil:
		m, err := DecodeManifestFile(af)
		if err != nil {
			return nil, err
		}
		return ResolveManifest(ctx, m, from, opts...)
	case isRegularFile(ref):
		// A file ReadArg did not take for a manifest (not JSON, no
		// mediaType, too large) is a manifest that does not decode: its
		// error names the file. A weights reference never names a file
		// here, and a registry is never asked for one.
		_, err := ReadManifest(ref)
		if err == nil {
			err = fmt.Errorf("manifest %s: not a weights volume manifest", ref)
		}
		return nil, err
	case strings.HasPrefix(ref, "oci:"):
		res, err = resolveLayout(ctx, ref, true)
	default:
		res, err = resolveRegistry(ctx, ref, true, opts...)
	}
	if err != nil {
		return nil, err
	}
	if from != "" {
		if res.Source, err = SourceFor(ctx, from, opts...); err != nil {
			return nil, err
		}
	}
	return res, nil
}

// isRegularFile says whether path names a regular file on this host.
func isRegularFile(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular()
}

// DecodeManifestFile decodes a volume manifest file a command was named, as
// localfile.ReadArg read it (the one rule that told it from a reference).
func DecodeManifestFile(af *localfile.ArgFile) (*Manifest, error) {
	if af.MediaType != MediaTypeManifest {
		return nil, fmt.Errorf("%s: not a weights volume manifest (mediaType %q, lock_version %d)", af.Path, af.MediaType, af.LockVersion)
	}
	m, err := DecodeManifest(bytes.NewReader(af.Bytes))
	if err != nil {
		return nil, fmt.Errorf("manifest %s: %w", af.Path, err)
	}
	return m, nil
}

// ResolveManifest is Resolve of a volume manifest already read: its
// blobs come from from, else the repository the manifest names.
func ResolveManifest(ctx context.Context, m *Manifest, from string, opts ...registry.Option) (*Resolved, error) {
	res := &Resolved{Manifest: m}
	if from == "" {
		from = m.Repository
	}
	if from != "" {
		var err error
		if res.Source, err = SourceFor(ctx, from, opts...); err != nil {
			return nil, err
		}
	}
	return res, nil
}

// SourceFor is the blob source of a repository: oci:DIR or REGISTRY/REPO.
func SourceFor(ctx context.Context, repo string, opts ...registry.Option) (blob.Source, error) {
	if dir, ok := strings.CutPrefix(repo, "oci:"); ok {
		dir, _, _ = strings.Cut(dir, "@")
		return blob.Layout{Dir: dir}, nil
	}
	r, err := registry.ParseName(repo, opts...)
	if err != nil {
		return nil, fmt.Errorf("repository %q: %v", repo, err)
	}
	return registry.ClientFor(ctx, r.Context(), opts...)
}

// resolveLayout finds the artifact in an OCI layout by tag, digest, or
// as the layout's only manifest: layers.LayoutEntries, the one selector
// (and tag rule) of every layout reader.
func resolveLayout(ctx context.Context, ref string, follow bool) (*Resolved, error) {
	r, err := layers.ParseRef(ref)
	if err != nil {
		return nil, fmt.Errorf("weights %q: %v", ref, err)
	}
	sel, _, err := layers.LayoutEntries(r)
	if err != nil {
		return nil, fmt.Errorf("weights: %v", err)
	}
	if len(sel) > 1 {
		return nil, fmt.Errorf("weights %q: the layout holds several manifests; name one with oci:DIR:TAG or oci:DIR@sha256:HEX", ref)
	}
	pick := sel[0]
	if pick.MediaType.IsIndex() {
		return followIndex(ctx, ref, follow)
	}
	src := blob.Layout{Dir: r.Path}
	raw, err := blob.ReadVerified(ctx, src, pick.Digest, pick.Size, 4<<20)
	if err != nil {
		return nil, fmt.Errorf("weights %q: manifest: %v", ref, err)
	}
	abs, _ := filepath.Abs(r.Path)
	if label, ok, err := imageLabel(ctx, src, raw); err != nil {
		return nil, fmt.Errorf("weights %q: %v", ref, err)
	} else if ok {
		if !follow {
			return nil, fmt.Errorf("weights %q: an image, not a weights artifact", ref)
		}
		return followLabel(ctx, ref, label)
	}
	m, err := manifestFromArtifact(ctx, src, raw)
	if err != nil {
		return nil, fmt.Errorf("weights %q: %v", ref, err)
	}
	return &Resolved{Manifest: m, Source: src, Ref: "oci:" + abs + "@" + pick.Digest.String()}, nil
}

func resolveRegistry(ctx context.Context, ref string, follow bool, opts ...registry.Option) (*Resolved, error) {
	r, err := layers.ParseRef(ref, opts...)
	if err != nil {
		return nil, err
	}
	if r.Kind != layers.KindRegistry {
		return nil, fmt.Errorf("weights %q: want a registry reference, oci:DIR or a manifest file", ref)
	}
	// One client for the repository (the caller's pool, WithPool: kiln
	// warm's set was read through it) serves the manifest and the blobs.
	f, err := registry.ClientFor(ctx, r.Name.Context(), opts...)
	if err != nil {
		return nil, fmt.Errorf("weights %q: %v", ref, registry.RedactError(err))
	}
	raw, desc, err := f.Manifest(ctx, r.Name)
	if err != nil {
		return nil, fmt.Errorf("weights %q: %v", ref, registry.RedactError(err))
	}
	if desc.MediaType.IsIndex() {
		return followIndex(ctx, ref, follow, opts...)
	}
	if label, ok, err := imageLabel(ctx, f, raw); err != nil {
		return nil, fmt.Errorf("weights %q: %v", ref, err)
	} else if ok {
		if !follow {
			return nil, fmt.Errorf("weights %q: an image, not a weights artifact", ref)
		}
		return followLabel(ctx, ref, label, opts...)
	}
	m, err := manifestFromArtifact(ctx, f, raw)
	if err != nil {
		return nil, fmt.Errorf("weights %q: %v", ref, err)
	}
	dg, err := name.NewDigest(r.Name.Context().String()+"@"+desc.Digest.String(), name.WeakValidation)
	if err != nil {
		return nil, err
	}
	return &Resolved{Manifest: m, Source: f, Ref: dg.String()}, nil
}

// FromArtifact resolves a weights artifact whose manifest bytes the
// caller already read and verified by digest (kiln warm, while computing
// its warm set): raw is that manifest, ref names it by digest, and src
// serves its blobs. Nothing is fetched twice.
func FromArtifact(ctx context.Context, ref string, raw []byte, src blob.Source) (*Resolved, error) {
	m, err := manifestFromArtifact(ctx, src, raw)
	if err != nil {
		return nil, fmt.Errorf("weights %q: %v", ref, err)
	}
	return &Resolved{Manifest: m, Source: src, Ref: ref}, nil
}

// manifestFromArtifact reads the volume manifest blob an artifact carries
// and checks it against the artifact's own layer list: a manifest that
// points at blobs the artifact does not have, or names other sizes or media
// types, is refused.
func manifestFromArtifact(ctx context.Context, src blob.Source, raw []byte) (*Manifest, error) {
	var am v1.Manifest
	if err := json.Unmarshal(raw, &am); err != nil {
		return nil, fmt.Errorf("not an OCI manifest: %v", err)
	}
	var vm *v1.Descriptor
	have := map[v1.Hash]v1.Descriptor{}
	for i := range am.Layers {
		d := am.Layers[i]
		if d.MediaType == MediaTypeManifest {
			vm = &am.Layers[i]
			continue
		}
		have[d.Digest] = d
	}
	if vm == nil {
		return nil, fmt.Errorf("not a kiln weights artifact: no layer of media type %s (artifactType %q)", MediaTypeManifest, am.ArtifactType)
	}
	if vm.Size > maxManifestBytes {
		return nil, fmt.Errorf("volume manifest %s: %d bytes is more than kiln reads", vm.Digest, vm.Size)
	}
	b, err := blob.ReadVerified(ctx, src, vm.Digest, vm.Size, maxManifestBytes)
	if err != nil {
		return nil, fmt.Errorf("volume manifest: %v", err)
	}
	m, err := DecodeManifest(strings.NewReader(string(b)))
	if err != nil {
		return nil, fmt.Errorf("volume manifest %s: %v", vm.Digest, err)
	}
	for i, l := range m.Layers {
		h, _ := v1.NewHash(l.Digest)
		d, ok := have[h]
		if !ok {
			return nil, fmt.Errorf("volume manifest layers[%d] %s: not in the artifact", i, l.Digest)
		}
		if d.Size != l.Size || string(d.MediaType) != l.MediaType {
			return nil, fmt.Errorf("volume manifest layers[%d] %s: %s of %d bytes, the artifact says %s of %d", i, l.Digest, l.MediaType, l.Size, d.MediaType, d.Size)
		}
	}
	return m, nil
}

// imageLabel reads the dev.kiln.weights.manifest label when raw is the
// manifest of a runnable image (a slimmed one points at its weights).
func imageLabel(ctx context.Context, src blob.Source, raw []byte) (string, bool, error) {
	var am v1.Manifest
	if err := json.Unmarshal(raw, &am); err != nil {
		return "", false, fmt.Errorf("not an OCI manifest: %v", err)
	}
	if !am.Config.MediaType.IsConfig() {
		return "", false, nil
	}
	b, err := blob.ReadVerified(ctx, src, am.Config.Digest, am.Config.Size, 16<<20)
	if err != nil {
		return "", false, fmt.Errorf("image config: %v", err)
	}
	var cfg v1.ConfigFile
	if err := json.Unmarshal(b, &cfg); err != nil {
		return "", false, fmt.Errorf("image config: %v", err)
	}
	label, err := labelOf(cfg.Config.Labels)
	return label, err == nil, err
}

// labelOf is an image's dev.kiln.weights.manifest label; an image without
// one is neither a weights artifact nor one kiln weights strip slimmed.
func labelOf(labels map[string]string) (string, error) {
	if l := labels[layers.LabelWeightsManifest]; l != "" {
		return l, nil
	}
	return "", fmt.Errorf("an image without a %s label: not a weights artifact nor an image slimmed by kiln weights strip", layers.LabelWeightsManifest)
}

// followIndex resolves an image index — several platforms, or one image
// with attestations beside it, as kiln slim --sbom and kiln build
// --provenance push — to its image the way every kiln command picks one
// (the host's platform; attestation manifests are never it), and follows
// that image's label. A weights artifact is never an index.
func followIndex(ctx context.Context, ref string, follow bool, opts ...registry.Option) (*Resolved, error) {
	if !follow {
		return nil, fmt.Errorf("weights %q: an image index, not a weights artifact", ref)
	}
	r, err := layers.ParseRef(ref, opts...)
	if err != nil {
		return nil, fmt.Errorf("weights %q: %v", ref, err)
	}
	root, err := layers.Resolve(ctx, r, opts...)
	if err != nil {
		return nil, fmt.Errorf("weights %q: %v", ref, err)
	}
	label, err := labelOf(root.ConfigFile.Config.Labels)
	if err != nil {
		return nil, fmt.Errorf("weights %q: %v", ref, err)
	}
	return followLabel(ctx, ref, label, opts...)
}

// followLabel resolves the artifact an image's label names (one hop only).
func followLabel(ctx context.Context, image, label string, opts ...registry.Option) (*Resolved, error) {
	// A label names an artifact reference, never a file on this host.
	if !strings.HasPrefix(label, "oci:") && (strings.HasSuffix(label, ".json") || strings.HasPrefix(label, "/") || strings.HasPrefix(label, ".")) {
		return nil, fmt.Errorf("image %q: label %s=%q: not an artifact reference", image, layers.LabelWeightsManifest, label)
	}
	var res *Resolved
	var err error
	if strings.HasPrefix(label, "oci:") {
		res, err = resolveLayout(ctx, label, false)
	} else {
		res, err = resolveRegistry(ctx, label, false, opts...)
	}
	if err != nil {
		return nil, fmt.Errorf("image %q: following its %s label: %v", image, layers.LabelWeightsManifest, err)
	}
	res.Image = image
	return res, nil
}
