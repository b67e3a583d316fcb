package sbom

import (
	"net/url"
	"sort"
	"strings"

	"github.com/kiln-build/kiln/recipes"
)

// FromPlan is what a build's plan states for certain: the stack's
// versions and the GPU architectures compiled, as metadata properties.
func FromPlan(p *recipes.Plan) []Property {
	if p == nil {
		return nil
	}
	props := []Property{{"kiln:plan:name", p.Name}, {"kiln:plan:cuda", p.CUDA}, {"kiln:plan:os", p.OS}, {"kiln:plan:python", p.Python}}
	if p.PythonSource != "" {
		props = append(props, Property{"kiln:plan:python-source", p.PythonSource})
	}
	for _, kv := range p.StackPins() {
		props = append(props, Property{"kiln:plan:" + kv[0], kv[1]})
	}
	if len(p.Platforms) > 0 {
		props = append(props, Property{"kiln:plan:platforms", strings.Join(p.Platforms, ",")})
	}
	return props
}

// FromLock lists a lock's pinned inputs: the base images by digest (per
// platform manifest) and every wheel with its SHA-256, for platform (""
// for all). lockDigest is the lock file's sha256.
func FromLock(l *recipes.Lock, lockDigest, platform string) ([]Component, []Property) {
	var comps []Component
	roles := make([]string, 0, len(l.BaseImages))
	for r := range l.BaseImages {
		roles = append(roles, r)
	}
	sort.Strings(roles)
	for _, role := range roles {
		b := l.BaseImages[role]
		c := Component{Type: "container", Name: b.Ref, Version: b.Digest,
			Properties: []Property{{"kiln:source", "lock"}, {"kiln:base-image", role}}}
		if h, ok := strings.CutPrefix(b.Digest, "sha256:"); ok {
			c.Hashes = []Hash{{"SHA-256", h}}
		}
		plats := make([]string, 0, len(b.Platforms))
		for p := range b.Platforms {
			plats = append(plats, p)
		}
		sort.Strings(plats)
		for _, p := range plats {
			c.Properties = append(c.Properties, Property{"kiln:platform-manifest:" + p, b.Platforms[p]})
		}
		comps = append(comps, c)
	}
	for _, w := range l.Wheels {
		if platform != "" && w.Platform != "" && w.Platform != platform {
			continue
		}
		c := Component{Type: TypeLibrary, Name: w.Name, Version: w.Version,
			PURL:       PyPIPURL(w.Name, w.Version) + "?file_name=" + url.QueryEscape(w.Filename),
			Properties: []Property{{"kiln:source", "lock"}, {"kiln:wheel:platform", w.Platform}, {"kiln:wheel:url", w.URL}}}
		if w.SHA256 != "" {
			c.Hashes = []Hash{{"SHA-256", strings.ToLower(w.SHA256)}}
		}
		comps = append(comps, c)
	}
	if d := l.Plan; d != nil && d.PythonDist != nil {
		d := d.PythonDist
		// The relocatable CPython kiln unpacks in the image.
		for _, a := range d.Archives {
			if platform != "" && a.Platform != platform {
				continue
			}
			comps = append(comps, Component{Type: TypeApplication, Name: "cpython", Version: d.Version,
				PURL:       "pkg:generic/cpython@" + url.PathEscape(d.Version) + "?download_url=" + url.QueryEscape(a.URL),
				Hashes:     []Hash{{"SHA-256", strings.ToLower(a.SHA256)}},
				Properties: []Property{{"kiln:source", "lock"}, {"kiln:python:platform", a.Platform}, {"kiln:python:release", d.Release}, {"kiln:python:url", a.URL}}})
		}
	}
	props := []Property{{"kiln:recipe", l.Recipe}, {"kiln:recipe-sha256", l.RecipeHash}, {"kiln:data-version", l.DataVersion}}
	if lockDigest != "" {
		props = append(props, Property{"kiln:lock-sha256", strings.TrimPrefix(lockDigest, "sha256:")})
	}
	return comps, append(props, FromPlan(l.Plan)...)
}
