package sign

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"sort"
	"strings"

	"github.com/goccy/go-yaml"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/kiln-build/kiln/internal/localfile"
	"github.com/kiln-build/kiln/layers"
	"github.com/kiln-build/kiln/registry"
)

// Policy says which public keys an image must be signed by, per registry
// or repository. A plain PEM public key is the policy "every image, this
// key".
//
// A policy file (YAML or JSON, schema kiln.verify-policy/v1):
//
//	schema: kiln.verify-policy/v1
//	keys:
//	  - scope: 127.0.0.1:5000/acme   # registry, or registry/repository prefix
//	    key: acme.pub                # relative to the policy file
//	  - scope: "*"                   # everything else
//	    key: fleet.pub
//
// The longest scope that matches an image's repository on a path
// boundary wins; its keys (several entries of one scope: any of them)
// are the only ones tried. An image no scope matches is refused.
type Policy struct {
	Source string
	rules  []rule
}

type rule struct {
	scope string
	keys  []*PublicKey
}

// PolicySchema names the policy file format.
const PolicySchema = "kiln.verify-policy/v1"

type policyFile struct {
	Schema string `yaml:"schema" json:"schema"`
	Keys   []struct {
		Scope string `yaml:"scope" json:"scope"`
		Key   string `yaml:"key" json:"key"`
	} `yaml:"keys" json:"keys"`
}

// LoadPolicy reads a PEM public key or a policy file (verify --key, warm
// and host check --verify-key: its errors name the file; the caller names
// its flag).
func LoadPolicy(path string) (*Policy, error) {
	b, err := localfile.ReadFile(path, "key or policy", localfile.MaxPolicy)
	if err != nil {
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	pemKey := func() (*Policy, error) {
		k, err := ParsePublicKey(b)
		if err != nil {
			return nil, fmt.Errorf("%s: %v", path, err)
		}
		k.Source = path
		return &Policy{Source: path, rules: []rule{{scope: "*", keys: []*PublicKey{k}}}}, nil
	}
	// A key file starts with its PEM block; a policy may mention one in
	// a comment and is still a policy.
	if bytes.HasPrefix(bytes.TrimSpace(b), []byte("-----BEGIN ")) {
		return pemKey()
	}
	var pf policyFile
	// Unknown fields are refused: a misspelt "keys" would otherwise be a
	// policy that trusts nothing, or less than its author meant.
	if err := yaml.UnmarshalWithOptions(b, &pf, yaml.DisallowUnknownField()); err != nil {
		if bytes.Contains(b, []byte("-----BEGIN ")) {
			return pemKey()
		}
		return nil, fmt.Errorf("%s: neither a PEM public key nor a policy file (%s): %v", path, PolicySchema, err)
	}
	if pf.Schema != PolicySchema {
		return nil, fmt.Errorf("%s: schema %q, want %s", path, pf.Schema, PolicySchema)
	}
	if len(pf.Keys) == 0 {
		return nil, fmt.Errorf("%s: keys: empty", path)
	}
	p := &Policy{Source: path}
	byScope := map[string]int{}
	for i, e := range pf.Keys {
		scope, err := canonicalScope(e.Scope)
		if err != nil {
			return nil, fmt.Errorf("%s: keys[%d].scope: %v", path, i, err)
		}
		if e.Key == "" {
			return nil, fmt.Errorf("%s: keys[%d].key: empty", path, i)
		}
		kp := e.Key
		if !filepath.IsAbs(kp) {
			kp = filepath.Join(filepath.Dir(path), kp)
		}
		k, err := LoadPublicKey(kp)
		if err != nil {
			return nil, fmt.Errorf("%s: keys[%d].key: %v", path, i, err)
		}
		j, ok := byScope[scope]
		if !ok {
			j = len(p.rules)
			byScope[scope] = j
			p.rules = append(p.rules, rule{scope: scope})
		}
		p.rules[j].keys = append(p.rules[j].keys, k)
	}
	// Longest scope first; "*" last.
	sort.SliceStable(p.rules, func(i, j int) bool {
		if p.rules[i].scope == "*" || p.rules[j].scope == "*" {
			return p.rules[j].scope == "*" && p.rules[i].scope != "*"
		}
		return len(p.rules[i].scope) > len(p.rules[j].scope)
	})
	return p, nil
}

// canonicalScope spells a scope as go-containerregistry names the
// repositories it is matched against, reading it as image names are read
// (docker's rule): "docker.io/library/ubuntu" and "ubuntu" are
// index.docker.io/library/ubuntu. A scope without "/" is a registry only
// when it looks like a host (a "." or ":", or localhost); otherwise it is
// a Docker Hub short name: a registry no reference can name would be a
// rule that never matches, leaving the image to the "*" key (N8).
func canonicalScope(s string) (string, error) {
	s = strings.TrimSuffix(strings.TrimSpace(s), "/")
	switch {
	case s == "":
		return "", fmt.Errorf("empty (use \"*\" for every image)")
	case s == "*":
		return s, nil
	case strings.Contains(s, "@"):
		return "", fmt.Errorf("%q names a digest; a scope is a registry or a repository (%s)", s, s[:strings.Index(s, "@")])
	case !strings.Contains(s, "/") && strings.Contains(s, ":") && !isPort(s[strings.LastIndex(s, ":")+1:]):
		return "", fmt.Errorf("%q names a tag; a scope is a registry or a repository (%s)", s, s[:strings.LastIndex(s, ":")])
	case !strings.Contains(s, "/") && (strings.ContainsAny(s, ".:") || s == "localhost"):
		r, err := name.NewRegistry(s)
		if err != nil {
			return "", fmt.Errorf("%q is not a registry: %v", s, err)
		}
		return r.RegistryStr(), nil
	}
	r, err := name.NewRepository(s)
	if err != nil {
		return "", fmt.Errorf("%q is not a REGISTRY/REPOSITORY: %v", s, err)
	}
	return r.RegistryStr() + "/" + r.RepositoryStr(), nil
}

func isPort(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// Keys returns the keys an image in repo must be signed by and the scope
// that chose them; none when no scope matches.
func (p *Policy) Keys(repo name.Repository) ([]*PublicKey, string) {
	full := repo.RegistryStr() + "/" + repo.RepositoryStr()
	for _, r := range p.rules {
		if r.scope == "*" || full == r.scope || strings.HasPrefix(full, r.scope+"/") || repo.RegistryStr() == r.scope {
			return r.keys, r.scope
		}
	}
	return nil, ""
}

// VerifyRef verifies the manifest the registry reference ref resolves to
// (Resolve: GET and hash what is served, as a pull gets it) under p, as
// kiln verify does. ref that is not a registry reference is an error.
func (p *Policy) VerifyRef(ctx context.Context, ref string, lopts ...registry.Option) (*Result, error) {
	r, err := layers.ParseRef(ref, lopts...)
	if err != nil {
		return nil, err
	}
	if r.Kind != layers.KindRegistry {
		return nil, fmt.Errorf("%s is not a registry reference", ref)
	}
	desc, err := Resolve(ctx, r.Name, lopts...)
	if err != nil {
		return nil, fmt.Errorf("image %q: %w", ref, err)
	}
	return p.VerifyDigest(ctx, ref, r.Name.Context(), r.Name.Context(), desc.Digest, lopts...)
}

// VerifyDigest verifies digest d, named ref, whose signatures are read
// from readRepo (a --mirror endpoint's, or repo itself), against the keys
// p names for repo (the image's real name). A policy that names no key
// for repo is a wrong-key result, not an error: the image is refused.
func (p *Policy) VerifyDigest(ctx context.Context, ref string, repo, readRepo name.Repository, d v1.Hash, lopts ...registry.Option) (*Result, error) {
	keys, _ := p.Keys(repo)
	if len(keys) == 0 {
		return &Result{Ref: ref, Digest: d.String(), Reason: ReasonWrongKey, Signatures: []Found{},
			Detail: fmt.Sprintf("the policy %s names no key for %s", p.Source, repo)}, nil
	}
	return Verify(ctx, ref, readRepo, d, keys, lopts...)
}
