package registry

import (
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/distribution/reference"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/opencontainers/go-digest"
)

// ParseName reads a registry reference by the one rule (NormalizeName)
// and hands go-containerregistry the full name, so every request, log line
// and record names docker.io/library/ubuntu:latest, never "ubuntu". Plain
// HTTP is allowed for loopback hosts and those WithInsecureRegistries names.
func ParseName(s string, opts ...Option) (name.Reference, error) {
	return MakeOptions(opts).ParseName(s)
}

// ParseName is ParseName under o.
func (o *Options) ParseName(s string) (name.Reference, error) {
	full, err := NormalizeName(s)
	if err != nil {
		return nil, err
	}
	var nopts []name.Option
	if o.Insecure(Host(full)) {
		nopts = append(nopts, name.Insecure)
	}
	ref, err := name.ParseReference(full, nopts...)
	if err != nil {
		return nil, fmt.Errorf("not a valid reference: %v (write [REGISTRY/]REPO[:TAG|@sha256:DIGEST], e.g. ubuntu:24.04 or ghcr.io/org/app:v1)", trimNameErr(err))
	}
	return ref, nil
}

// NormalizeName is kiln's one rule for image names, Docker's own
// (github.com/distribution/reference): a Docker Hub short name gains its
// registry and, for official images, library/ ("nvidia/cuda:12.4.1-base" is
// docker.io/nvidia/cuda:12.4.1-base, "ubuntu" docker.io/library/ubuntu),
// and a name without tag or digest gets :latest. The error says what is
// wrong with s and what to write instead.
func NormalizeName(s string) (string, error) {
	if strings.TrimSpace(s) != s || strings.ContainsFunc(s, func(r rune) bool { return r < 0x20 || r == 0x7f || r == ' ' }) {
		return "", fmt.Errorf("an image name has no spaces or control characters (write [REGISTRY/]REPO[:TAG], e.g. ubuntu:24.04)")
	}
	if before, dg, ok := strings.Cut(s, "@"); ok {
		if err := digest.Digest(dg).Validate(); err != nil {
			return "", fmt.Errorf("digest %q is not sha256: and 64 hex digits (write %s@sha256:<64 hex digits> as docker images --digests prints it, or a tag)", dg, before)
		}
	}
	n, err := reference.ParseNormalizedNamed(s)
	if err != nil {
		return "", nameError(s, err)
	}
	return reference.TagNameOnly(n).String(), nil
}

// validTag is the OCI distribution spec's tag.
var validTag = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$`)

// nameError turns distribution/reference's error into why and what to write.
func nameError(s string, err error) error {
	const want = "write [REGISTRY/]REPO[:TAG|@sha256:DIGEST], e.g. ubuntu:24.04 or ghcr.io/org/app:v1"
	repo, tag := s, ""
	if i := strings.LastIndex(s, ":"); i > strings.LastIndex(s, "/") {
		repo, tag = s[:i], s[i+1:]
	}
	switch {
	case errors.Is(err, reference.ErrNameContainsUppercase) || strings.Contains(err.Error(), "must be lowercase"):
		fix := repo
		if host, path, ok := strings.Cut(repo, "/"); ok && (strings.ContainsAny(host, ".:") || host == "localhost") {
			fix = host + "/" + strings.ToLower(path)
		} else {
			fix = strings.ToLower(repo)
		}
		if tag != "" {
			fix += ":" + tag
		}
		return fmt.Errorf("repository names are lower case (write %s)", fix)
	case errors.Is(err, reference.ErrTagInvalidFormat) || tag != "" && !strings.Contains(tag, "/") && !validTag.MatchString(tag):
		return fmt.Errorf("tag %q is not valid: a tag is up to 128 letters, digits, '_', '.' and '-', not starting with '.' or '-'", tag)
	case errors.Is(err, reference.ErrNameTooLong):
		return fmt.Errorf("the name is longer than %d characters", reference.RepositoryNameTotalLengthMax)
	case errors.Is(err, reference.ErrNameEmpty):
		return fmt.Errorf("the image name is empty (%s)", want)
	}
	return fmt.Errorf("not a valid reference: %v (%s)", err, want)
}

func trimNameErr(err error) string {
	msg := err.Error()
	return strings.TrimSuffix(msg, "; no digest or tag found")
}

// Host extracts the registry host of an unparsed reference the way
// the Docker CLI does: the first component, if it looks like a host.
func Host(s string) string {
	first, _, ok := strings.Cut(s, "/")
	if !ok {
		return name.DefaultRegistry
	}
	if strings.ContainsAny(first, ".:") || first == "localhost" {
		return first
	}
	return name.DefaultRegistry
}
