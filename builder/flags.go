package builder

import (
	"fmt"

	"github.com/kiln-build/kiln/analyze"
	"github.com/kiln-build/kiln/internal/bytesize"
	"github.com/kiln-build/kiln/layers"
	"github.com/kiln-build/kiln/layers/erofs"
	"github.com/kiln-build/kiln/registry"
)

// Flags are a build's choices in its command line's words (kiln build's
// flags); Parse checks them into RunOptions.
type Flags struct {
	DryRun     bool
	Dockerfile bool

	Push         string
	Outputs      []string // --to
	Compression  string
	Format       string
	Erofs        string
	MaxLayerSize string
	CacheFrom    []string
	CacheTo      []string
	Progress     string
	Platforms    []string
	NoTest       bool
	// Rebuild is --rebuild: build even when the --push repository's
	// content tag holds an image built from the same inputs (by default
	// that image answers). SkipExisting is the deprecated --skip-existing,
	// which that default made a no-op.
	Rebuild      bool
	SkipExisting bool
	// Explain is --explain: per step, hit or miss against ExplainAgainst
	// (default: the --push tag's last push), which input changed, and the
	// cost in bytes.
	Explain        bool
	ExplainAgainst string
	Check          string
	Insecure       []string
	// SBOM is --sbom: each pushed image gets a CycloneDX BOM of its
	// pinned inputs, as a referrer, or with --provenance in the
	// attestation manifest beside the image (sbom.go).
	SBOM bool
	// Provenance is --provenance: min, max or none (BuildKit's SLSA
	// provenance attestation); BuilderID its builder.id.
	Provenance string
	BuilderID  string
}

// usage is a command-line mistake (UsageError).
func usage(format string, a ...any) error { return &UsageError{fmt.Errorf(format, a...)} }

// Parse checks f, before any work, into a run's options (registry reads
// and writes through lopts) and --check's rules (nil: no check). Every
// mistake is a *UsageError naming the flag. Provenance is normalized in
// place (none: "").
func (f *Flags) Parse(lopts []registry.Option) (*RunOptions, *analyze.Rules, error) {
	// The one --progress vocabulary, and BuildKit's rawjson (not shown).
	progress, err := ParseProgress(f.Progress)
	if err != nil {
		return nil, nil, &UsageError{err}
	}
	comp := f.Compression
	switch comp {
	case "zstd", "gzip", "none":
	case "both":
		comp = "gzip" // --push adds the zstd variant
	default:
		return nil, nil, usage("--compression: %q is not one of both, gzip, zstd, none", f.Compression)
	}
	maxLayer, err := bytesize.Parse(f.MaxLayerSize)
	if err != nil {
		return nil, nil, usage("--max-layer-size: %v", err)
	}
	if f.DryRun && f.Dockerfile {
		return nil, nil, usage("--dry-run and --dockerfile print different things; pick one")
	}
	switch f.Provenance {
	case "", "none", "false":
		f.Provenance = ""
	case "min", "max":
	default:
		return nil, nil, usage("--provenance %q: want min, max or none", f.Provenance)
	}
	if f.BuilderID != "" && f.Provenance == "" {
		return nil, nil, usage("--builder-id needs --provenance min or max")
	}
	if f.SBOM && f.Push == "" && f.Provenance == "" {
		return nil, nil, usage("--sbom needs --push (attached next to the pushed image) or --provenance (attested beside the image in its index)")
	}
	o := &RunOptions{Options: Options{Platforms: f.Platforms, Compression: comp, MaxLayerSize: maxLayer, Progress: progress,
		NoProbes: f.NoTest, Insecure: f.Insecure, Registry: lopts, Provenance: f.Provenance, BuilderID: f.BuilderID},
		Encodings: f.Compression, Rebuild: f.Rebuild, SBOM: f.SBOM}
	if o.Outputs, err = f.outputs(lopts); err != nil {
		return nil, nil, err
	}
	if f.Push != "" {
		// Parsed once (outputs: the first).
		o.Push = o.Outputs[0].Ref
	}
	for _, s := range f.CacheFrom {
		c, err := ParseCacheSpec(s, false)
		if err != nil {
			return nil, nil, usage("--cache-from: %v", err)
		}
		o.CacheFrom = append(o.CacheFrom, c)
	}
	for _, s := range f.CacheTo {
		c, err := ParseCacheSpec(s, true)
		if err != nil {
			return nil, nil, usage("--cache-to: %v", err)
		}
		o.CacheTo = append(o.CacheTo, c)
	}
	for _, p := range f.Platforms {
		if _, err := ParsePlatform(p); err != nil {
			return nil, nil, usage("--platform: %v", err)
		}
	}
	if o.ErofsCompression, err = erofs.ParseCompression(f.Erofs); err != nil {
		return nil, nil, usage("--erofs-compression: %v", err)
	}
	switch f.Format {
	case "oci", "":
	case "erofs":
		if f.Push == "" {
			return nil, nil, usage("--format erofs needs --push: the EROFS image is converted from the pushed one and pushed beside it (or run kiln convert --format erofs on an OCI layout)")
		}
		if len(f.Platforms) > 1 {
			return nil, nil, usage("--format erofs: one --platform at a time (an EROFS image is one platform's filesystem)")
		}
		// Beside the --push tag.
		if o.ErofsTo, err = layers.ErofsDest(o.Push); err != nil {
			return nil, nil, usage("--format erofs: %v", err)
		}
	default:
		return nil, nil, usage("--format: %q is not one of oci, erofs", f.Format)
	}
	var rules *analyze.Rules
	if f.Check != "" {
		if len(o.Outputs) == 0 {
			return nil, nil, usage("--check needs --push or --to: it analyzes the image the build wrote")
		}
		if rules, err = analyze.LoadRules(f.Check); err != nil {
			return nil, nil, usage("--check: %v", err)
		}
	}
	if f.ExplainAgainst != "" {
		f.Explain = true
	}
	if f.Explain && f.Push == "" && f.ExplainAgainst == "" {
		return nil, nil, usage("--explain needs --push (it compares with the tag's last push) or --explain-against REF")
	}
	o.Explain = f.Explain
	if f.ExplainAgainst != "" {
		if o.ExplainAgainst, err = layers.ParseRef(f.ExplainAgainst, lopts...); err != nil {
			return nil, nil, usage("--explain-against: %v", err)
		}
	}
	if f.Rebuild && f.SkipExisting {
		return nil, nil, usage("--rebuild and --skip-existing say opposite things; pick one (reusing is the default)")
	}
	return o, rules, nil
}

// outputs are --push (and its REF-zstd with --compression both) and the
// --to outputs.
func (f *Flags) outputs(lopts []registry.Option) ([]Output, error) {
	var outputs []Output
	if f.Push != "" {
		ref, err := layers.ParseRef(f.Push, lopts...)
		if err != nil {
			return nil, usage("--push: %v", err)
		}
		if ref.Kind != layers.KindRegistry {
			return nil, usage("--push %s: want a registry reference; use --to for %s", f.Push, ref.Kind)
		}
		outputs = append(outputs, Output{Ref: ref})
		if f.Compression == "both" {
			zref, err := layers.ZstdDest(ref)
			if err != nil {
				return nil, usage("--compression both: %v", err)
			}
			outputs = append(outputs, Output{Ref: zref, Compression: "zstd"})
		}
	}
	for _, o := range f.Outputs {
		ref, err := layers.ParseRef(o)
		if err != nil {
			return nil, usage("--to: %v", err)
		}
		switch ref.Kind {
		case layers.KindOCILayout, layers.KindDockerArchive:
			outputs = append(outputs, Output{Ref: ref})
		default:
			return nil, usage("--to %s: want oci:DIR or docker-archive:FILE (use --push for a registry)", o)
		}
	}
	if len(f.Outputs) > 1 {
		for _, o := range outputs {
			if o.Ref.Kind == layers.KindOCILayout {
				return nil, usage("--to oci:DIR cannot be combined with another --to in one build; run kiln build again for the other (it is fully cached)")
			}
		}
	}
	return outputs, nil
}
