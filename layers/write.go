package layers

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/distribution/reference"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/kiln-build/kiln/internal/atomicfile"
	"github.com/kiln-build/kiln/layers/blob"
	"github.com/kiln-build/kiln/registry"
)

// Write stores img at dest, which uses the same syntax as Open:
//
//	REGISTRY/REPO[:TAG]        pushed (blobs the registry has are skipped)
//	oci:DIR[:TAG]              added to an OCI image layout (created if absent);
//	                           TAG becomes its org.opencontainers.image.ref.name
//	                           and replaces an earlier image of the same name
//	docker-archive:FILE[:TAG]  a 'docker load'-able tarball, written to a
//	                           temporary file and renamed, so an interrupted
//	                           write leaves no half archive
//
// Layers stream from img to the sink; nothing is held in memory. A push
// goes through the caller's pool's client of the repository
// (registry.WithPool; made WithPush), else logs in on its own. It returns
// the digest of the image's manifest.
func Write(ctx context.Context, img v1.Image, r Ref, opts ...registry.Option) (v1.Hash, error) {
	dest := r.String()
	dig, err := img.Digest()
	if err != nil {
		return v1.Hash{}, fmt.Errorf("output %q: %v", dest, err)
	}
	switch r.Kind {
	case KindRegistry:
		if err := remote.Write(r.Name, img, pushOptions(ctx, r, opts)...); err != nil {
			return v1.Hash{}, fmt.Errorf("output %q: push: %v", dest, err)
		}
	case KindOCILayout:
		if err := writeLayout(r, img); err != nil {
			return v1.Hash{}, fmt.Errorf("output %q: %v", dest, err)
		}
	case KindDockerArchive:
		if err := writeArchive(r, img, registry.MakeOptions(opts).ArchiveName); err != nil {
			return v1.Hash{}, fmt.Errorf("output %q: %v", dest, err)
		}
	default:
		return v1.Hash{}, fmt.Errorf("output %q: unsupported destination", dest)
	}
	return dig, nil
}

// pushOptions are the remote options a push to r goes through: over the
// pool's client of its repository, which may push (registry.RemoteFor).
func pushOptions(ctx context.Context, r Ref, opts []registry.Option) []remote.Option {
	return registry.RemoteFor(ctx, r.Name.Context(), append(opts[:len(opts):len(opts)], registry.WithPush())...)
}

func writeLayout(r Ref, img v1.Image) error {
	p, err := layout.FromPath(r.Path)
	if err != nil {
		if err := os.MkdirAll(r.Path, 0o755); err != nil {
			return err
		}
		if p, err = layout.Write(r.Path, empty.Index); err != nil {
			return err
		}
	}
	linkFileLayers(r.Path, img)
	var lopts []layout.Option
	if r.Tag != "" {
		lopts = append(lopts, layout.WithAnnotations(map[string]string{refNameAnnotation: r.Tag}))
		// One image per name, like a tag: ReplaceImage drops the earlier
		// descriptor carrying the same ref.name annotation.
		return p.ReplaceImage(img, func(d v1.Descriptor) bool {
			return d.Annotations[refNameAnnotation] == r.Tag
		}, lopts...)
	}
	return p.AppendImage(img, lopts...)
}

// linkFileLayers puts each layer of img that kiln wrote to a local file
// (a FileLayer: slim's and convert's scratch blobs, hashed as they were
// written) into the layout at dir as a hard link to that file, so that the
// layout costs no second copy of the image (kiln slim's probe layout is
// the whole slim image). The layout's writer then finds the blob there at
// its size and skips it. Where a link cannot be made (another file
// system), the writer copies the blob, as it does every other layer's.
func linkFileLayers(dir string, img v1.Image) {
	ls, err := img.Layers()
	if err != nil {
		return
	}
	bdir := filepath.Join(dir, "blobs", "sha256")
	for _, l := range ls {
		fl, ok := l.(*FileLayer)
		if !ok || blob.CheckDigest(fl.digest) != nil {
			continue
		}
		dst := filepath.Join(bdir, fl.digest.Hex)
		if _, err := os.Lstat(dst); err == nil {
			continue
		}
		fi, err := os.Stat(fl.path)
		if err != nil || !fi.Mode().IsRegular() || fi.Size() != fl.size {
			continue
		}
		if os.MkdirAll(bdir, 0o755) != nil {
			return
		}
		_ = os.Link(fl.path, dst)
	}
}

// WithArchiveName is the name (REPO:TAG) a docker archive written by Write
// records when its destination names none (docker-archive:FILE) or only a
// tag (FILE.tar:v1 keeps REPO, takes v1): the name of the image it was
// made from (SourceName), as docker save records it. Without it such an
// archive is named kiln/image.
func WithArchiveName(n string) registry.Option {
	return func(o *registry.Options) { o.ArchiveName = n }
}

// BareTag says whether s is only a tag ("latest", "1"), no repository.
func BareTag(s string) bool { return !strings.ContainsAny(s, "/:@") }

// LayoutImageName is the full name of an OCI layout's image whose
// index.json entry records entry (its ref.name or containerd name), which
// a file anyone may write gives, so it is checked by NormalizeName: a full
// name as it is; a bare tag ("latest", as skopeo and crane write ref.name)
// or none (then latest) under the layout directory's name, as docker tag
// would name it (oci:img/wapp's latest is docker.io/library/wapp:latest).
// The error says why a name is refused and what to do.
func LayoutImageName(dir, entry string) (string, error) {
	if entry != "" && !BareTag(entry) {
		n, err := registry.NormalizeName(entry)
		if err != nil {
			return "", fmt.Errorf("index.json names the image %q, which is not an image name: %v", entry, err)
		}
		return n, nil
	}
	tag := entry
	if tag == "" {
		tag = "latest"
	}
	abs, _ := filepath.Abs(dir)
	full := filepath.Base(abs) + ":" + tag
	n, err := registry.NormalizeName(full)
	if err != nil {
		return "", fmt.Errorf("index.json names the image only by the tag %q, and the directory's name does not make an image name (%s: %v); record a full name in its org.opencontainers.image.ref.name (REPO:TAG), or rename the directory", entry, full, err)
	}
	return n, nil
}

// SourceName is the name img has in its source, in Docker's short form
// (ubuntu:24.04, nvidia/cuda:12.4.1-base-ubuntu22.04, HOST/REPO:TAG), for
// the docker archives written from it: a registry or daemon image's
// reference (its tag, latest for a digest), a docker archive's first
// RepoTag, an OCI layout's by LayoutImageName. ok is false when none of
// these makes an image name.
func SourceName(img *Image) (string, bool) {
	r := img.Ref
	var n string
	switch r.Kind {
	case KindRegistry:
		n = r.Canonical()
	case KindDaemon:
		n = r.Tag
	case KindDockerArchive:
		if len(img.Names) > 0 {
			n = img.Names[0]
		}
	case KindOCILayout:
		n, _ = LayoutImageName(r.Path, r.Tag)
	}
	named, err := reference.ParseNormalizedNamed(n)
	if err != nil || n == "" {
		return "", false
	}
	tag := "latest"
	if t, ok := named.(reference.Tagged); ok {
		tag = t.Tag()
	}
	return reference.FamiliarName(named) + ":" + tag, true
}

func writeArchive(r Ref, img v1.Image, from string) error {
	repo := "kiln/image"
	tag := "latest"
	if i := strings.LastIndex(from, ":"); i > strings.LastIndex(from, "/") {
		repo, tag = from[:i], from[i+1:]
	} else if from != "" {
		repo = from
	}
	switch {
	case r.Tag == "":
		tag = repo + ":" + tag
	case !strings.ContainsAny(r.Tag, ":/"):
		// A bare tag, as Open matches it: "FILE.tar:v1" → REPO:v1.
		tag = repo + ":" + r.Tag
	default:
		tag = r.Tag
	}
	t, err := name.NewTag(tag)
	if err != nil {
		return fmt.Errorf("archive tag %q: %v", tag, err)
	}
	dir := filepath.Dir(r.Path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	f, err := atomicfile.Create(r.Path, 0o644)
	if err != nil {
		return err
	}
	defer f.Abort()
	bw := bufio.NewWriterSize(f, 1<<20)
	if err := writeDockerArchive(bw, t, img); err != nil {
		return err
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	return f.Commit()
}

// WriteIndex stores idx at dest: a registry (the index and every manifest
// and blob it holds are pushed) or an OCI layout (its TAG names the index,
// replacing an earlier entry of that name). Docker archives hold images,
// not indexes. It returns the index's digest.
func WriteIndex(ctx context.Context, idx v1.ImageIndex, r Ref, opts ...registry.Option) (v1.Hash, error) {
	dest := r.String()
	dig, err := idx.Digest()
	if err != nil {
		return v1.Hash{}, fmt.Errorf("output %q: %v", dest, err)
	}
	switch r.Kind {
	case KindRegistry:
		if err := remote.WriteIndex(r.Name, idx, pushOptions(ctx, r, opts)...); err != nil {
			return v1.Hash{}, fmt.Errorf("output %q: push: %v", dest, err)
		}
	case KindOCILayout:
		p, err := layout.FromPath(r.Path)
		if err != nil {
			if err := os.MkdirAll(r.Path, 0o755); err != nil {
				return v1.Hash{}, fmt.Errorf("output %q: %v", dest, err)
			}
			if p, err = layout.Write(r.Path, empty.Index); err != nil {
				return v1.Hash{}, fmt.Errorf("output %q: %v", dest, err)
			}
		}
		var lopts []layout.Option
		if r.Tag != "" {
			lopts = append(lopts, layout.WithAnnotations(map[string]string{refNameAnnotation: r.Tag}))
			err = p.ReplaceIndex(idx, func(d v1.Descriptor) bool { return d.Annotations[refNameAnnotation] == r.Tag }, lopts...)
		} else {
			err = p.AppendIndex(idx, lopts...)
		}
		if err != nil {
			return v1.Hash{}, fmt.Errorf("output %q: %v", dest, err)
		}
	default:
		return v1.Hash{}, fmt.Errorf("output %q: an image index (the image with its SBOM attestation) goes to a registry or an OCI layout, not a %s", dest, r.Kind)
	}
	return dig, nil
}
