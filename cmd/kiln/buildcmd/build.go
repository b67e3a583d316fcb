package buildcmd

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/moby/buildkit/client"
	"github.com/spf13/cobra"

	"github.com/kiln-build/kiln/analyze"
	"github.com/kiln-build/kiln/builder"
	"github.com/kiln-build/kiln/cmd/kiln/internal/cmdutil"
	"github.com/kiln-build/kiln/internal/bytesize"
	"github.com/kiln-build/kiln/layers"
	"github.com/kiln-build/kiln/layers/erofs"
	"github.com/kiln-build/kiln/recipes"
	"github.com/kiln-build/kiln/registry"
	"github.com/kiln-build/kiln/slim"
)

// BuildOptions are kiln build's inputs.
type BuildOptions struct {
	// Version is kiln\'s, recorded in what the command attaches (SBOM, provenance).
	Version    string
	IO         *cmdutil.IO
	File       string
	Locked     bool
	DryRun     bool
	Dockerfile bool
	JSON       bool

	cmdutil.BuilderFlags

	Push         string
	Outputs      []string
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
	Epoch          string // SOURCE_DATE_EPOCH; "" = $SOURCE_DATE_EPOCH, else 0
	Insecure       []string
	// lopts is the run's registry options (registryOptions).
	lopts []registry.Option
	// SBOM is --sbom: each pushed image gets a CycloneDX BOM of its
	// pinned inputs, as a referrer, or with --provenance in the
	// attestation manifest beside the image (sbomcmd.go).
	SBOM bool
	// Provenance is --provenance: min, max or none (BuildKit's SLSA
	// provenance attestation); BuilderID its builder.id.
	Provenance string
	BuilderID  string
	cmdutil.SignFlag
	cmdutil.RecipeFlags
	// BuildKit connects to the builder (Factory.Connect).
	BuildKit func(ctx context.Context, addr string, tls builder.TLS) (*client.Client, string, error)
	cmdutil.WheelCacheFlags
}

// NewCmdBuild is kiln build [FILE].
// runF, when not nil, gets the parsed options instead of the
// command running (tests stop there).
func NewCmdBuild(f *cmdutil.Factory, runF func(*BuildOptions) error) *cobra.Command {
	ios := f.IO
	opts := &BuildOptions{IO: ios, Version: f.Version, BuildKit: f.Connect}
	cmd := &cobra.Command{
		Use:   "build [FILE]",
		Short: "Build a slim two-stage CUDA image from a recipe through BuildKit",
		Long: `Resolves a recipe (default ./kiln.yaml; or its kiln.lock with --locked) and
builds it on a BuildKit daemon as an LLB graph: a devel stage on the plan's
-devel base fetches (or compiles) the torch, FlashAttention and bitsandbytes
wheels into a wheelhouse with pip and compiler caches mounted; a runtime
stage on the -runtime base installs them through a read-only bind mount (no
wheel file stays in a layer), then the extra apt and pip packages, then the
app: one layer per component, so an app change re-pushes only the app layer.
The recipe's test: commands run in the runtime image as part of the build;
one failing fails the build.

--push publishes gzip under REF and zstd under REF-zstd from one solve
(--compression both, the default): gzip for every Docker and containerd
(a platform that pulls your image may run Docker 20.10), zstd for Docker >=
23.0, containerd >= 1.5 and kiln warm. --to gets the first (gzip; a
docker archive is always gzip). A pip component whose wheels install more
than --max-layer-size is installed in several steps, whole wheels in name
order, one layer each, so pulls fetch and unpack them in parallel.
Timestamps are rewritten to SOURCE_DATE_EPOCH (default 0), so the same
inputs give the same image digest.

--format erofs (with --push) also converts the pushed image into native
EROFS layers under REF-erofs, for containerd's EROFS snapshotter (no untar
at a cold start), SBOM'd (--sbom) and signed (--sign-key) like the others;
one platform at a time. It needs mkfs.erofs and fsck.erofs (erofs-utils 1.7+).

The daemon: --builder, else $BUILDKIT_HOST (either one named is used or the
build fails; kiln never falls back from it), else
unix:///run/kiln-buildkit/buildkitd.sock, else /run/buildkit/buildkitd.sock.
Docker users have one already: --builder docker-container://buildx_buildkit_default
(docker buildx create --node default --driver docker-container --bootstrap
starts that container). Without Docker: run buildkitd as root (a release of
github.com/moby/buildkit, or your distribution's package); it listens on
/run/buildkit/buildkitd.sock, which kiln tries.`,
		Example: `  kiln build --dry-run
  kiln build --dockerfile > Dockerfile
  kiln build kiln.yaml --push 127.0.0.1:5000/acme/serve:1.0
  kiln build --locked --to oci:./out --to docker-archive:serve.tar
  kiln build --push reg.example.com/serve:1.0 --cache-from reg.example.com/serve:cache --cache-to reg.example.com/serve:cache
  kiln build --builder tcp://buildkitd:1234 --tlscacert ca.pem --tlscert cert.pem --tlskey key.pem --push ...
  kiln build --builder docker-container://buildx_buildkit_default --progress plain --to oci:out`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 1 {
				opts.File = args[0]
			}
			opts.RecipeFlags.Changed(cmd)
			return cmdutil.Run(cmd.Context(), opts, runF, runBuild)
		},
	}
	fl := cmd.Flags()
	fl.BoolVar(&opts.Locked, "locked", false, "build from kiln.lock alone (base images pinned by digest); fails when the lock is stale")
	fl.BoolVar(&opts.DryRun, "dry-run", false, "print the plan and the graph's digest; build nothing")
	fl.BoolVar(&opts.Dockerfile, "dockerfile", false, "print an equivalent multi-stage Dockerfile; build nothing")
	fl.BoolVar(&opts.JSON, "json", false, "print the result (or the dry run) as JSON")
	cmdutil.Resumes(cmdutil.SetSchema(cmd, "kiln.build/v1"))
	opts.BuilderFlags.Register(cmd)
	fl.StringVar(&opts.Push, "push", "", "push the image to this registry reference")
	fl.StringArrayVar(&opts.Outputs, "to", nil, "write the image: oci:DIR (OCI layout) or docker-archive:FILE (docker load / ctr import); repeatable")
	cmdutil.Alias(fl, "output", "to")
	fl.StringVar(&opts.Compression, "compression", "both", cmdutil.CompressionHelp+", or none (uncompressed)")
	fl.StringVar(&opts.Format, "format", "oci", "layer format: oci (the --compression encodings) or erofs (with --push: also native EROFS layers under REF-erofs, for containerd's EROFS snapshotter)")
	fl.StringVar(&opts.Erofs, "erofs-compression", string(erofs.DefaultCompression), "with --format erofs: the compression inside each EROFS image (none, lz4, lz4hc, zstd, lzma)")
	fl.StringVar(&opts.MaxLayerSize, "max-layer-size", slim.DefaultMaxLayerSize, "split a pip component's install into several layers when its wheels install more than this (0: one layer per component)")
	fl.StringArrayVar(&opts.CacheFrom, "cache-from", nil, "import build cache: REF, local:DIR or type=registry|local,k=v...; repeatable")
	fl.StringArrayVar(&opts.CacheTo, "cache-to", nil, "export build cache (mode=max, zstd): REF, local:DIR or type=...; repeatable")
	cmdutil.ProgressFlag(fl, &opts.Progress)
	fl.StringSliceVar(&opts.Platforms, "platform", nil, "platforms to build, e.g. linux/amd64,linux/arm64 (default: the recipe's)")
	fl.BoolVar(&opts.NoTest, "no-test", false, "do not run the recipe's test: commands")
	fl.StringVar(&opts.Check, "check", "", "after the build, analyze the pushed or written image against a rules file (as kiln analyze --ci; the recipe's GPUs become require_gpus); exit 3 when a rule breaks")
	fl.BoolVar(&opts.Rebuild, "rebuild", false, "with --push: build even when an image built from the same inputs (lock, bases by digest, graph, app files) is in the repository under its content tag; without it that image answers, checked by its labels")
	fl.BoolVar(&opts.SkipExisting, "skip-existing", false, "the default now (see --rebuild)")
	fl.BoolVar(&opts.Explain, "explain", false, "say per step whether it hit or missed against the image --explain-against names (default: the --push tag's last push), which input changed (base, apt, pip pins, compiled wheels, GPU archs, app files), and the bytes to push and to pull again")
	fl.StringVar(&opts.ExplainAgainst, "explain-against", "", "the image --explain compares with (implies --explain)")
	// Hidden, not MarkDeprecated: pflag's note would go to stdout (cobra
	// prints it through OutOrStderr, which is the command's stdout) and
	// break --json's one object; runBuild says it on stderr.
	_ = fl.MarkHidden("skip-existing")
	fl.StringVar(&opts.Epoch, "source-date-epoch", "", "timestamp for layers and config (default $SOURCE_DATE_EPOCH, else 0)")
	fl.StringSliceVar(&opts.Insecure, "insecure-registry", nil, "registry host that speaks plain HTTP for --push (loopback always may)")
	opts.SignFlag.Register(cmd)
	fl.BoolVar(&opts.SBOM, "sbom", false, "attach a CycloneDX (and SPDX) SBOM of the build's pinned inputs (lock: base images by digest, wheels with SHA-256; plan: CUDA/cuDNN/torch, GPU architectures; recipe and lock digests): with --provenance in the attestation manifest beside each image, as BuildKit stores SBOMs; else (--push only) as a referrer, keeping the image's digest reproducible")
	fl.StringVar(&opts.Provenance, "provenance", "none", "attach BuildKit's SLSA v1 provenance: max (every step's definition), min (the request), none; kiln's recipe and lock digests are among its parameters. The pushed index's digest then changes per build (the provenance records start time and invocation ID); the image manifests inside stay reproducible")
	fl.StringVar(&opts.BuilderID, "builder-id", "", "with --provenance: the provenance's builder.id, a URI naming who ran the build (e.g. the CI job's URL)")
	opts.RecipeFlags.Register(cmd)
	opts.WheelCacheFlags.Register(cmd)
	return cmd
}

// buildInputs loads the recipe (or lock) and returns the plan, the
// inputs, the lock (with --locked) and the recipe's directory.
func buildInputs(ctx context.Context, opts *BuildOptions) (*recipes.Plan, builder.Inputs, *recipes.Lock, string, error) {
	file := cmdutil.RecipeFile(opts.File)
	var in builder.Inputs
	r, err := recipes.Load(file)
	if err != nil {
		return nil, in, nil, "", cmdutil.RecipeLoadErr(err)
	}
	in.RecipeHash = r.Hash()
	var plan *recipes.Plan
	var l *recipes.Lock
	if opts.Locked {
		lp := recipes.LockPath(file)
		if l, err = recipes.ReadLock(lp); err != nil {
			return nil, in, nil, "", fmt.Errorf("--locked: %w", err)
		}
		if why := l.Stale(r, nil); len(why) > 0 {
			return nil, in, nil, "", fmt.Errorf("--locked: %s is stale: %s; run kiln lock", lp, strings.Join(why, "; "))
		}
		in.LockDigest = l.FileDigest
		plan = l.LockedPlan()
	} else {
		ropts, oerr := opts.ResolverOptions()
		if oerr != nil {
			return nil, in, nil, "", oerr
		}
		if plan, err = recipes.Resolve(ctx, r, ropts...); err != nil {
			return nil, in, nil, "", cmdutil.Refusal(opts.IO, opts.JSON, err)
		}
	}
	epoch := cmp.Or(opts.Epoch, os.Getenv("SOURCE_DATE_EPOCH"), "0")
	e, err := strconv.ParseInt(epoch, 10, 64)
	if err != nil || e < 0 {
		return nil, in, nil, "", cmdutil.UsageErr("--source-date-epoch: %q is not a non-negative integer", epoch)
	}
	in.SourceDateEpoch = &e
	// The app files' digest goes into the image's record (--explain tells
	// an app change by it). Files that cannot be read leave it out: a dry
	// run needs none, and the build itself says which one is missing.
	if d, err := builder.AppDigest(plan, r.Dir()); err == nil {
		in.AppDigest = d
	}
	return plan, in, l, r.Dir(), nil
}

// parseBuildFlags checks kiln build's flags, before any work, into the
// run's options and --check's rules (nil: no check); every mistake is a
// usage error (exit 2) naming the flag.
func parseBuildFlags(opts *BuildOptions) (*builder.RunOptions, *analyze.Rules, error) {
	// The one --progress vocabulary, and BuildKit's rawjson (not shown).
	progress, err := builder.ParseProgress(opts.Progress)
	if err != nil {
		return nil, nil, cmdutil.UsageErr("%v", err)
	}
	opts.Progress = cmdutil.NormalizeProgress(opts.Progress)
	comp := opts.Compression
	switch comp {
	case "zstd", "gzip", "none":
	case "both":
		comp = "gzip" // --push adds the zstd variant
	default:
		return nil, nil, cmdutil.UsageErr("--compression: %q is not one of both, gzip, zstd, none", opts.Compression)
	}
	maxLayer, err := bytesize.Parse(opts.MaxLayerSize)
	if err != nil {
		return nil, nil, cmdutil.UsageErr("--max-layer-size: %v", err)
	}
	if opts.DryRun && opts.Dockerfile {
		return nil, nil, cmdutil.UsageErr("--dry-run and --dockerfile print different things; pick one")
	}
	switch opts.Provenance {
	case "", "none", "false":
		opts.Provenance = ""
	case "min", "max":
	default:
		return nil, nil, cmdutil.UsageErr("--provenance %q: want min, max or none", opts.Provenance)
	}
	if opts.BuilderID != "" && opts.Provenance == "" {
		return nil, nil, cmdutil.UsageErr("--builder-id needs --provenance min or max")
	}
	if opts.SBOM && opts.Push == "" && opts.Provenance == "" {
		return nil, nil, cmdutil.UsageErr("--sbom needs --push (attached next to the pushed image) or --provenance (attested beside the image in its index)")
	}
	lopts := opts.registryOptions()
	ro := &builder.RunOptions{Options: builder.Options{Platforms: opts.Platforms, Compression: comp, MaxLayerSize: maxLayer, Progress: progress,
		ProgressOut: opts.IO.ErrOut, NoProbes: opts.NoTest, Insecure: opts.Insecure, Registry: lopts, Tools: toolsExecutable(),
		Provenance: opts.Provenance, BuilderID: opts.BuilderID, Params: map[string]string{"version": opts.Version}},
		Connect: func(ctx context.Context) (*client.Client, string, error) {
			return opts.BuildKit(ctx, opts.Builder, opts.TLS())
		},
		Push: opts.Push, Encodings: opts.Compression, Rebuild: opts.Rebuild, SBOM: opts.SBOM, Version: opts.Version}
	if ro.Outputs, err = parseOutputs(opts); err != nil {
		return nil, nil, err
	}
	for _, s := range opts.CacheFrom {
		c, err := builder.ParseCacheSpec(s, false)
		if err != nil {
			return nil, nil, cmdutil.UsageErr("--cache-from: %v", err)
		}
		ro.CacheFrom = append(ro.CacheFrom, c)
	}
	for _, s := range opts.CacheTo {
		c, err := builder.ParseCacheSpec(s, true)
		if err != nil {
			return nil, nil, cmdutil.UsageErr("--cache-to: %v", err)
		}
		ro.CacheTo = append(ro.CacheTo, c)
	}
	for _, p := range opts.Platforms {
		if _, err := builder.ParsePlatform(p); err != nil {
			return nil, nil, cmdutil.UsageErr("--platform: %v", err)
		}
	}
	if ro.ErofsCompression, err = erofs.ParseCompression(opts.Erofs); err != nil {
		return nil, nil, cmdutil.UsageErr("--erofs-compression: %v", err)
	}
	switch opts.Format {
	case "oci", "":
	case "erofs":
		if opts.Push == "" {
			return nil, nil, cmdutil.UsageErr("--format erofs needs --push: the EROFS image is converted from the pushed one and pushed beside it (or run kiln convert --format erofs on an OCI layout)")
		}
		if len(opts.Platforms) > 1 {
			return nil, nil, cmdutil.UsageErr("--format erofs: one --platform at a time (an EROFS image is one platform's filesystem)")
		}
		if ro.ErofsTo, err = cmdutil.ErofsDest(opts.Push, nil); err != nil {
			return nil, nil, cmdutil.UsageErr("--format erofs: %v", err)
		}
	default:
		return nil, nil, cmdutil.UsageErr("--format: %q is not one of oci, erofs", opts.Format)
	}
	var rules *analyze.Rules
	if opts.Check != "" {
		if len(ro.Outputs) == 0 {
			return nil, nil, cmdutil.UsageErr("--check needs --push or --to: it analyzes the image the build wrote")
		}
		if rules, err = analyze.LoadRules(opts.Check); err != nil {
			return nil, nil, cmdutil.UsageErr("--check: %v", err)
		}
	}
	if opts.ExplainAgainst != "" {
		opts.Explain = true
	}
	if opts.Explain && opts.Push == "" && opts.ExplainAgainst == "" {
		return nil, nil, cmdutil.UsageErr("--explain needs --push (it compares with the tag's last push) or --explain-against REF")
	}
	ro.Explain, ro.ExplainAgainst = opts.Explain, opts.ExplainAgainst
	if opts.Rebuild && opts.SkipExisting {
		return nil, nil, cmdutil.UsageErr("--rebuild and --skip-existing say opposite things; pick one (reusing is the default)")
	}
	if opts.SkipExisting {
		fmt.Fprintln(opts.IO.ErrOut, "kiln: --skip-existing is deprecated and does nothing: with --push a no-op rebuild answers from the content tag by default (--rebuild opts out)")
	}
	if opts.SignKey != "" && opts.Push == "" {
		return nil, nil, cmdutil.UsageErr("--sign-key needs --push: the signature is stored next to the pushed image")
	}
	key, err := opts.SignFlag.LoadSigner()
	if err != nil {
		return nil, nil, err
	}
	ro.Signer = opts.SignFlag.Signer(key, lopts)
	return ro, rules, nil
}

// parseOutputs are --push (and its REF-zstd with --compression both) and
// the --to outputs.
func parseOutputs(opts *BuildOptions) ([]builder.Output, error) {
	var outputs []builder.Output
	if opts.Push != "" {
		ref, err := layers.ParseRef(opts.Push, opts.registryOptions()...)
		if err != nil {
			return nil, cmdutil.UsageErr("--push: %v", err)
		}
		if ref.Kind != layers.KindRegistry {
			return nil, cmdutil.UsageErr("--push %s: want a registry reference; use --to for %s", opts.Push, ref.Kind)
		}
		outputs = append(outputs, builder.Output{Ref: ref})
		if opts.Compression == "both" {
			zd, err := cmdutil.ZstdDest(opts.Push, nil)
			if err != nil {
				return nil, cmdutil.UsageErr("--compression both: %v", err)
			}
			zref, err := layers.ParseRef(zd, opts.registryOptions()...)
			if err != nil {
				return nil, cmdutil.UsageErr("--compression both: %v", err)
			}
			outputs = append(outputs, builder.Output{Ref: zref, Compression: "zstd"})
		}
	}
	for _, o := range opts.Outputs {
		ref, err := layers.ParseRef(o)
		if err != nil {
			return nil, cmdutil.UsageErr("--to: %v", err)
		}
		switch ref.Kind {
		case layers.KindOCILayout, layers.KindDockerArchive:
			outputs = append(outputs, builder.Output{Ref: ref})
		default:
			return nil, cmdutil.UsageErr("--to %s: want oci:DIR or docker-archive:FILE (use --push for a registry)", o)
		}
	}
	if len(opts.Outputs) > 1 {
		for _, o := range outputs {
			if o.Ref.Kind == layers.KindOCILayout {
				return nil, cmdutil.UsageErr("--to oci:DIR cannot be combined with another --to in one build; run kiln build again for the other (it is fully cached)")
			}
		}
	}
	return outputs, nil
}

func runBuild(ctx context.Context, opts *BuildOptions) error {
	opts.lopts = registry.Pooled(opts.registryOptions())
	ro, rules, err := parseBuildFlags(opts)
	if err != nil {
		return err
	}
	plan, in, lock, dir, err := buildInputs(ctx, opts)
	if err != nil {
		return err
	}
	if ro.WheelCache, err = wheelCache(opts, lock); err != nil {
		return err
	}
	if opts.Dockerfile {
		df, err := builder.Dockerfile(plan, in)
		if err != nil {
			return err
		}
		fmt.Fprint(opts.IO.Out, df)
		return nil
	}
	if opts.DryRun {
		d, err := builder.Dry(ctx, plan, in, opts.Platforms, opts.NoTest)
		if err != nil {
			return err
		}
		if opts.JSON {
			return cmdutil.WriteJSON(opts.IO.Out, d.JSON())
		}
		d.WriteText(opts.IO.Out, cmdutil.TermWidth(opts.IO.Out))
		return nil
	}
	ro.Plan, ro.Inputs, ro.ContextDir = plan, in, dir
	if opts.SBOM {
		ro.Lock = lock
	}
	if rules != nil {
		ro.Check = func(ctx context.Context, ref string) error { return checkBuilt(ctx, opts, plan, ref, rules) }
	}
	rep, err := builder.Run(ctx, *ro)
	var ue *builder.UsageError
	if errors.As(err, &ue) {
		return cmdutil.Exit(cmdutil.ExitUsage, ue.Err)
	}
	if err != nil {
		return err
	}
	writeBuildReport(opts, plan, rep)
	return nil
}

// toolsExecutable is the kiln binary that prunes GPU code inside builds:
// $KILN_TOOLS, else this executable.
func toolsExecutable() string {
	if p := os.Getenv("KILN_TOOLS"); p != "" {
		return p
	}
	p, err := os.Executable()
	if err != nil {
		return ""
	}
	return p
}

// registryOptions are the options every registry read and write of the
// run goes through: --insecure-registry, and one pool (registry.Pooled,
// made as the run starts), so that the content tag, the wheel cache, the
// pushed digests, the SBOMs and the signatures log in to each repository
// once. Options a test builds without running have no pool.
func (opts *BuildOptions) registryOptions() []registry.Option {
	if opts.lopts == nil {
		return []registry.Option{registry.WithInsecureRegistries(opts.Insecure...)}
	}
	return opts.lopts
}
