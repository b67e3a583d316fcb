package builder

import (
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/moby/buildkit/client"

	"github.com/kiln-build/kiln/layers"
	"github.com/kiln-build/kiln/recipes"
	"github.com/kiln-build/kiln/registry"
)

// Output is one export destination: a registry reference (pushed), an
// OCI image layout directory, or a docker archive file, as
// layers.ParseRef reads them (REF, oci:DIR, docker-archive:FILE).
type Output struct {
	Ref layers.Ref
	// Compression overrides Options.Compression for this output: two
	// image outputs, gzip under TAG and zstd under TAG-zstd, publish both
	// encodings of one solve.
	Compression string
}

// ParseOutput reads an output reference: a registry reference is pushed,
// oci:DIR and docker-archive:FILE are written.
func ParseOutput(s string, opts ...registry.Option) (Output, error) {
	r, err := layers.ParseRef(s, opts...)
	if err != nil {
		return Output{}, err
	}
	switch r.Kind {
	case layers.KindRegistry, layers.KindOCILayout, layers.KindDockerArchive:
		return Output{Ref: r}, nil
	}
	return Output{}, fmt.Errorf("output %s: want a registry reference, oci:DIR or docker-archive:FILE", s)
}

// Pushes says whether the output is a registry push.
func (o Output) Pushes() bool { return o.Ref.Kind == layers.KindRegistry }

func (o Output) String() string { return o.Ref.String() }

// CacheSpec is a --cache-from/--cache-to entry.
type CacheSpec struct {
	Type  string // registry or local
	Attrs map[string]string
}

// ParseCacheSpec accepts "type=registry,ref=R[,k=v]", "type=local,src|dest=DIR",
// "local:DIR" or a bare registry reference. to selects export defaults
// (mode=max, zstd, OCI media types).
func ParseCacheSpec(s string, to bool) (CacheSpec, error) {
	c := CacheSpec{Attrs: map[string]string{}}
	switch {
	case strings.Contains(s, "="):
		for _, kv := range strings.Split(s, ",") {
			k, v, ok := strings.Cut(kv, "=")
			if !ok {
				return c, fmt.Errorf("cache %q: %q is not key=value", s, kv)
			}
			if k == "type" {
				c.Type = v
			} else {
				c.Attrs[k] = v
			}
		}
	case strings.HasPrefix(s, "local:"):
		c.Type = "local"
		dir := strings.TrimPrefix(s, "local:")
		if to {
			c.Attrs["dest"] = dir
		} else {
			c.Attrs["src"] = dir
		}
	case s == "":
		return c, fmt.Errorf("empty cache spec")
	default:
		c.Type = "registry"
		c.Attrs["ref"] = s
	}
	switch c.Type {
	case "registry":
		if c.Attrs["ref"] == "" {
			return c, fmt.Errorf("cache %q: registry cache needs ref=", s)
		}
		if to {
			def(c.Attrs, "mode", "max")
			def(c.Attrs, "compression", "zstd")
			def(c.Attrs, "oci-mediatypes", "true")
			def(c.Attrs, "image-manifest", "true")
		}
		if isLoopbackRef(c.Attrs["ref"]) {
			def(c.Attrs, "registry.insecure", "true")
		}
	case "local":
		key := "src"
		if to {
			key = "dest"
			def(c.Attrs, "mode", "max")
			def(c.Attrs, "compression", "zstd")
			def(c.Attrs, "oci-mediatypes", "true")
		}
		if c.Attrs[key] == "" {
			return c, fmt.Errorf("cache %q: local cache needs %s=DIR", s, key)
		}
	default:
		return c, fmt.Errorf("cache %q: type %q is not registry or local", s, c.Type)
	}
	return c, nil
}

func def(m map[string]string, k, v string) {
	if _, ok := m[k]; !ok {
		m[k] = v
	}
}

func isLoopbackRef(ref string) bool {
	host, _, _ := strings.Cut(ref, "/")
	return registry.IsLoopback(host)
}

// cacheEntries are the cache specs as BuildKit's solve takes them.
func cacheEntries(specs []CacheSpec) []client.CacheOptionsEntry {
	var out []client.CacheOptionsEntry
	for _, c := range specs {
		out = append(out, client.CacheOptionsEntry{Type: c.Type, Attrs: c.Attrs})
	}
	return out
}

// compression is the exporter's word for an output's compression (c, else
// the build's).
func (o Options) compression(c string) (string, error) {
	if c == "" {
		c = o.Compression
	}
	switch c {
	case "", "zstd":
		return "zstd", nil
	case "gzip", "uncompressed":
		return c, nil
	case "none":
		return "uncompressed", nil
	}
	return "", fmt.Errorf("compression %q: want zstd, gzip or none", c)
}

// imageAttrs are the exporter attributes every output shares: forced
// compression, OCI media types, the epoch as the config's and history's
// time. The layers' file times are already the epoch's (each run step
// sets what it wrote: runArgs), so the exporter does not rewrite them:
// BuildKit's rewrite-timestamp decodes and encodes every layer again at
// every export.
func imageAttrs(comp string, in Inputs) map[string]string {
	a := map[string]string{
		"compression":       comp,
		"force-compression": "true",
		"oci-mediatypes":    "true",
	}
	if in.SourceDateEpoch != nil {
		a["source-date-epoch"] = strconv.FormatInt(*in.SourceDateEpoch, 10)
	}
	return a
}

// exports are the build's outputs as BuildKit's export entries; the
// closers are the archive files they write (closed after the solve).
func exports(p *recipes.Plan, in Inputs, o Options) ([]client.ExportEntry, []io.Closer, error) {
	if _, err := o.compression(""); err != nil {
		return nil, nil, err
	}
	var local int
	for _, out := range o.Outputs {
		if !out.Pushes() {
			local++
		}
	}
	var entries []client.ExportEntry
	var closers []io.Closer
	fail := func(err error) ([]client.ExportEntry, []io.Closer, error) {
		for _, c := range closers {
			c.Close()
		}
		return nil, nil, err
	}
	for _, out := range o.Outputs {
		if out.Ref.Kind == layers.KindOCILayout && local > 1 {
			// BuildKit's client writes the layout's index.json from the
			// merged exporter response: another local export's digest would
			// end up in it.
			return fail(fmt.Errorf("an oci:DIR output cannot be combined with another oci or docker-archive output in one build; build again for the other (it is fully cached)"))
		}
		oc, err := o.compression(out.Compression)
		if err != nil {
			return fail(fmt.Errorf("output %s: %v", out, err))
		}
		a := imageAttrs(oc, in)
		switch out.Ref.Kind {
		case layers.KindRegistry:
			name, err := NormalizeRef(out.Ref.Name.String())
			if err != nil {
				return fail(fmt.Errorf("output %s: %v", out, err))
			}
			a["name"] = name
			a["push"] = "true"
			if isLoopbackRef(out.Ref.Name.String()) || insecureHost(out.Ref.Name.String(), o.Insecure) {
				a["registry.insecure"] = "true"
			}
			entries = append(entries, client.ExportEntry{Type: client.ExporterImage, Attrs: a})
		case layers.KindOCILayout:
			if err := os.MkdirAll(out.Ref.Path, 0o755); err != nil {
				return fail(err)
			}
			a["tar"] = "false"
			entries = append(entries, client.ExportEntry{Type: client.ExporterOCI, Attrs: a, OutputDir: out.Ref.Path})
		case layers.KindDockerArchive:
			f, err := os.Create(out.Ref.Path)
			if err != nil {
				return fail(err)
			}
			closers = append(closers, f)
			a["name"] = "kiln.local/" + sanitizeName(p.Name) + ":latest"
			// docker load wants the layers it can read.
			if oc == "zstd" {
				a["oci-mediatypes"] = "false"
				a["compression"] = "gzip"
			}
			entries = append(entries, client.ExportEntry{Type: client.ExporterDocker, Attrs: a, Output: func(map[string]string) (io.WriteCloser, error) { return nopCloser{f}, nil }})
		default:
			return fail(fmt.Errorf("output %s: want a registry reference, oci:DIR or docker-archive:FILE", out))
		}
	}
	return entries, closers, nil
}

// pushedDigests asks the registry for each pushed output's digest: with
// several image exports the exporters' responses are merged into one map.
// images keeps the per-platform image digests even for one platform.
func pushedDigests(ctx context.Context, o Options, images bool) ([]Pushed, error) {
	var pushed []Pushed
	for _, out := range o.Outputs {
		if !out.Pushes() {
			continue
		}
		oc, _ := o.compression(out.Compression)
		lopts := o.Registry
		if lopts == nil {
			lopts = []registry.Option{registry.WithInsecureRegistries(o.Insecure...)}
		}
		dg, imgs, err := layers.PlatformDigests(ctx, out.Ref.Name.String(), lopts...)
		if err != nil {
			return pushed, fmt.Errorf("output %s: pushed, but resolving its digest: %w", out, err)
		}
		pu := Pushed{Ref: out.Ref, Compression: oc, Digest: dg}
		if len(imgs) > 1 || images {
			pu.Images = imgs
		}
		pushed = append(pushed, pu)
	}
	return pushed, nil
}

type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }

func insecureHost(ref string, hosts []string) bool {
	host, _, _ := strings.Cut(ref, "/")
	for _, h := range hosts {
		if h == host {
			return true
		}
	}
	return false
}

func sanitizeName(s string) string {
	s = strings.ToLower(s)
	var b strings.Builder
	for _, r := range s {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.' {
			b.WriteRune(r)
		} else {
			b.WriteByte('-')
		}
	}
	if b.Len() == 0 {
		return "image"
	}
	return b.String()
}
