package layers

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/distribution/reference"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/kiln-build/kiln/registry"
)

// ZstdTagSuffix names an image's zstd variant: kiln build, slim and convert
// push REPO:TAG-zstd beside the gzip REPO:TAG, and kiln warm looks for it.
const ZstdTagSuffix = "-zstd"

// ZstdTag is t's zstd variant, TAG-zstd.
func ZstdTag(t name.Tag) name.Tag { return VariantTag(t, ZstdTagSuffix) }

// VariantTag is t's variant named by suffix: TAG-zstd (ZstdTag),
// TAG-estargz, the names kiln convert and slim publish beside TAG.
func VariantTag(t name.Tag, suffix string) name.Tag { return t.Context().Tag(t.TagStr() + suffix) }

// ErofsTagSuffix names an image's native EROFS variant (layers/erofs):
// kiln convert, slim and build --format erofs push REPO:TAG-erofs beside
// the gzip and zstd tags, for containerd's EROFS snapshotter.
const ErofsTagSuffix = "-erofs"

// ErofsTag is t's EROFS variant, TAG-erofs.
func ErofsTag(t name.Tag) name.Tag { return VariantTag(t, ErofsTagSuffix) }

// Kind says where an image reference points.
type Kind string

// The sources kiln reads images from.
const (
	KindRegistry      Kind = "registry"
	KindOCILayout     Kind = "oci"
	KindDockerArchive Kind = "docker-archive"
	// KindDaemon is an image in the local Docker daemon (docker-daemon:NAME),
	// read through the daemon's image-save API; Ref.Tag holds its full name.
	KindDaemon Kind = "docker-daemon"
)

// Ref is a parsed image reference.
type Ref struct {
	Kind Kind
	// Raw is what the user typed; errors name it.
	Raw string
	// Name is set for registry references.
	Name name.Reference
	// Path is the layout directory or archive file for local sources.
	Path string
	// Tag selects an image inside a layout (its ref.name annotation) or an
	// archive (its RepoTags); empty means "the only one".
	Tag string
	// Digest selects a layout's image by its index.json descriptor
	// (oci:DIR@sha256:HEX); it excludes Tag.
	Digest v1.Hash
}

func (r Ref) String() string { return r.Raw }

// MarshalText writes r as it was named (Raw): a report's "ref".
func (r Ref) MarshalText() ([]byte, error) { return []byte(r.Raw), nil }

// UnmarshalText reads a report's "ref" back (ParseRef without options:
// what a registry's options change, such as plain HTTP, is given again
// by whoever uses r).
func (r *Ref) UnmarshalText(b []byte) error {
	if len(b) == 0 {
		*r = Ref{}
		return nil
	}
	p, err := ParseRef(string(b))
	if err != nil {
		return err
	}
	*r = p
	return nil
}

// LayoutRef is oci:DIR[:TAG], an OCI layout kiln names itself (a work
// directory): no string is parsed.
func LayoutRef(dir, tag string) Ref {
	raw := "oci:" + dir
	if tag != "" {
		raw += ":" + tag
	}
	return Ref{Kind: KindOCILayout, Raw: raw, Path: dir, Tag: tag}
}

// RegistryRef is the reference of n, an image in a registry named by
// kiln itself (a tag it pushed, a digest it read): no string is parsed.
func RegistryRef(n name.Reference) Ref {
	return Ref{Kind: KindRegistry, Raw: n.String(), Name: n}
}

// ParseRef parses the reference syntax every kiln command shares:
//
//	[REGISTRY/]REPO[:TAG|@DIGEST]  a registry; Docker Hub short names as
//	                               docker, crane and skopeo read them
//	                               (ubuntu = docker.io/library/ubuntu:latest)
//	docker://REF                   the same, as skopeo writes it
//	oci:DIR[:TAG|@sha256:HEX]      an OCI image layout
//	docker-archive:FILE[:TAG]      a 'docker save' tarball
//	docker-daemon:NAME[:TAG]       an image in the local Docker daemon
//
// A refused reference's error says why and what to write.
func ParseRef(s string, opts ...registry.Option) (Ref, error) {
	o := registry.MakeOptions(opts)
	if s == "" {
		return Ref{}, fmt.Errorf("empty image reference (write [REGISTRY/]REPO[:TAG], e.g. ubuntu:24.04, or oci:DIR, docker-archive:FILE, docker-daemon:NAME)")
	}
	switch {
	case strings.HasPrefix(s, "oci:"):
		rest := strings.TrimPrefix(s, "oci:")
		if i := strings.LastIndex(rest, "@sha256:"); i >= 0 {
			h, err := v1.NewHash(rest[i+1:])
			if err != nil || len(h.Hex) != 64 || rest[:i] == "" {
				return Ref{}, fmt.Errorf("image %q: oci:DIR@sha256:HEX needs a directory and 64 hex digits", s)
			}
			return Ref{Kind: KindOCILayout, Raw: s, Path: rest[:i], Digest: h}, nil
		}
		dir, tag := splitLayout(rest)
		if dir == "" {
			return Ref{}, fmt.Errorf("image %q: oci: needs a directory (oci:DIR[:TAG|@sha256:HEX])", s)
		}
		return Ref{Kind: KindOCILayout, Raw: s, Path: dir, Tag: tag}, nil
	case strings.HasPrefix(s, "docker-archive:"):
		file, tag := splitArchive(strings.TrimPrefix(s, "docker-archive:"))
		if file == "" {
			return Ref{}, fmt.Errorf("image %q: docker-archive: needs a file (docker-archive:FILE.tar[:NAME:TAG])", s)
		}
		return Ref{Kind: KindDockerArchive, Raw: s, Path: file, Tag: tag}, nil
	case strings.HasPrefix(s, "docker-daemon:"):
		rest := strings.TrimPrefix(s, "docker-daemon:")
		if rest == "" {
			return Ref{}, fmt.Errorf("image %q: docker-daemon: needs an image name (docker-daemon:NAME[:TAG], as docker images lists it)", s)
		}
		n, err := registry.NormalizeName(rest)
		if err != nil {
			return Ref{}, fmt.Errorf("image %q: %v", s, err)
		}
		return Ref{Kind: KindDaemon, Raw: s, Tag: n}, nil
	case strings.HasPrefix(s, "docker://"):
		if strings.TrimPrefix(s, "docker://") == "" {
			return Ref{}, fmt.Errorf("image %q: docker:// needs an image name (docker://[REGISTRY/]REPO[:TAG])", s)
		}
		r, err := parseRegistry(strings.TrimPrefix(s, "docker://"), o)
		if err != nil {
			return Ref{}, fmt.Errorf("image %q: %v", s, err)
		}
		r.Raw = s
		return r, nil
	}
	if i := strings.Index(s, ":"); i > 0 && !strings.ContainsAny(s[:i], "./") && strings.HasPrefix(s[i+1:], "/") {
		return Ref{}, fmt.Errorf("image %q: unknown transport %q (write a registry reference such as ubuntu:24.04, docker://REF, oci:DIR[:TAG], docker-archive:FILE or docker-daemon:NAME)", s, s[:i])
	}
	r, err := parseRegistry(s, o)
	if err != nil {
		return Ref{}, fmt.Errorf("image %q: %v", s, err)
	}
	r.Raw = s
	return r, nil
}

// parseRegistry reads a registry reference by the one rule
// (registry.ParseName).
func parseRegistry(s string, o *registry.Options) (Ref, error) {
	ref, err := o.ParseName(s)
	if err != nil {
		return Ref{}, err
	}
	return Ref{Kind: KindRegistry, Name: ref}, nil
}

// DockerName is the name the Docker daemon gives a docker-daemon:
// reference's image, as docker images lists it and docker run takes it:
// docker-daemon:docker.io/library/ubuntu is ubuntu:latest,
// docker-daemon:acme/app:1 acme/app:1 (a name with a digest keeps it).
// ok is false for other kinds of reference.
func (r Ref) DockerName() (string, bool) {
	if r.Kind != KindDaemon {
		return "", false
	}
	n, err := reference.ParseNormalizedNamed(r.Tag)
	if err != nil {
		return "", false
	}
	return reference.FamiliarString(reference.TagNameOnly(n)), true
}

// Canonical is the reference written out in full, the name locks, plans
// and reports record: docker.io/library/ubuntu:24.04 for "ubuntu:24.04";
// local sources as typed.
func (r Ref) Canonical() string {
	if r.Kind == KindRegistry && r.Name != nil {
		return r.Name.String()
	}
	return r.Raw
}

// splitLayout splits an oci: reference's "DIR[:TAG]". kiln's own layouts
// name images in full (DIR:127.0.0.1:5000/app:v1, DIR:docker.io/library/
// ubuntu:24.04): the first colon before which a layout (a directory with
// an index.json) ends splits them; for a layout not yet written, a full
// name (one with a registry host) after a colon is the tag; else
// splitLocal.
func splitLayout(s string) (string, string) {
	if _, err := os.Stat(s); err == nil {
		return s, ""
	}
	for i := 0; i < len(s); i++ {
		if s[i] != ':' {
			continue
		}
		if fi, err := os.Stat(filepath.Join(s[:i], "index.json")); err == nil && fi.Mode().IsRegular() {
			return s[:i], s[i+1:]
		}
	}
	for i := 0; i < len(s); i++ {
		if s[i] != ':' {
			continue
		}
		if rest := s[i+1:]; registry.Host(rest) != name.DefaultRegistry || strings.HasPrefix(rest, "docker.io/") {
			if _, err := reference.ParseNormalizedNamed(rest); err == nil {
				return s[:i], rest
			}
		}
	}
	return splitLocal(s)
}

// splitLocal splits "path[:tag]" where the tag may not contain '/'. A path
// that exists as given wins, so files with colons still work.
func splitLocal(s string) (string, string) {
	if _, err := os.Stat(s); err == nil {
		return s, ""
	}
	i := strings.LastIndex(s, ":")
	if i < 0 || strings.Contains(s[i+1:], "/") {
		return s, ""
	}
	return s[:i], s[i+1:]
}

// splitArchive is splitLocal for docker archives, whose tags are image names
// with a repository ("FILE.tar:repo/name:tag"): a path ending in .tar ends at
// the first ".tar:".
func splitArchive(s string) (string, string) {
	if _, err := os.Stat(s); err == nil {
		return s, ""
	}
	if i := strings.Index(s, ".tar:"); i >= 0 {
		return s[:i+4], s[i+5:]
	}
	return splitLocal(s)
}

// ParsePlatform parses "os/arch[/variant]".
func ParsePlatform(s string) (v1.Platform, error) {
	parts := strings.Split(s, "/")
	if len(parts) < 2 || len(parts) > 3 || parts[0] == "" || parts[1] == "" {
		return v1.Platform{}, fmt.Errorf("platform %q: want OS/ARCH[/VARIANT], e.g. linux/amd64 or linux/arm64", s)
	}
	p := v1.Platform{OS: parts[0], Architecture: parts[1]}
	if len(parts) == 3 {
		p.Variant = parts[2]
	}
	return p, nil
}

// PlatformString formats p as os/arch[/variant].
func PlatformString(p v1.Platform) string {
	s := p.OS + "/" + p.Architecture
	if p.Variant != "" {
		s += "/" + p.Variant
	}
	return s
}
