package buildcmd

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/moby/buildkit/client"
	"github.com/spf13/cobra"

	"github.com/kiln-build/kiln/analyze"
	"github.com/kiln-build/kiln/builder"
	"github.com/kiln-build/kiln/cmd/kiln/internal/cmdutil"
	"github.com/kiln-build/kiln/convert"
	"github.com/kiln-build/kiln/internal/bytesize"
	"github.com/kiln-build/kiln/internal/termtable"
	"github.com/kiln-build/kiln/layers"
	"github.com/kiln-build/kiln/layers/erofs"
	"github.com/kiln-build/kiln/layers/publish"
	"github.com/kiln-build/kiln/recipes"
	"github.com/kiln-build/kiln/registry"
	"github.com/kiln-build/kiln/sbom"
	"github.com/kiln-build/kiln/sign"
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

// buildInputs loads the recipe (or lock) and returns the plan and inputs.
func buildInputs(ctx context.Context, opts *BuildOptions) (*recipes.Plan, builder.Inputs, string, error) {
	file := cmdutil.RecipeFile(opts.File)
	var in builder.Inputs
	r, err := recipes.Load(file)
	if err != nil {
		return nil, in, "", cmdutil.RecipeLoadErr(err)
	}
	in.RecipeHash = r.Hash()
	var plan *recipes.Plan
	if opts.Locked {
		lp := recipes.LockPath(file)
		l, err := recipes.ReadLock(lp)
		if err != nil {
			return nil, in, "", fmt.Errorf("--locked: %w", err)
		}
		if why := l.Stale(r, nil); len(why) > 0 {
			return nil, in, "", fmt.Errorf("--locked: %s is stale: %s; run kiln lock", lp, strings.Join(why, "; "))
		}
		in.LockDigest = l.FileDigest
		plan = l.LockedPlan()
	} else {
		ropts, oerr := opts.ResolverOptions()
		if oerr != nil {
			return nil, in, "", oerr
		}
		plan, err = recipes.Resolve(ctx, r, ropts...)
		if err != nil {
			return nil, in, "", cmdutil.Refusal(opts.IO, opts.JSON, err)
		}
	}
	epoch := opts.Epoch
	if epoch == "" {
		epoch = os.Getenv("SOURCE_DATE_EPOCH")
	}
	if epoch == "" {
		epoch = "0"
	}
	e, err := strconv.ParseInt(epoch, 10, 64)
	if err != nil || e < 0 {
		return nil, in, "", cmdutil.UsageErr("--source-date-epoch: %q is not a non-negative integer", epoch)
	}
	in.SourceDateEpoch = &e
	// The app files' digest goes into the image's record (--explain tells
	// an app change by it). Files that cannot be read leave it out: a dry
	// run needs none, and the build itself says which one is missing.
	if d, err := builder.AppDigest(plan, r.Dir()); err == nil {
		in.AppDigest = d
	}
	return plan, in, r.Dir(), nil
}

// buildFlags is what kiln build's flags say, checked before any work:
// where the image goes, the caches, the layer encoding and size cap.
type buildFlags struct {
	// wheels is the wheel cache (--wheel-cache, the recipe's wheel_cache:; nil: none).
	wheels    *builder.WheelCache
	outputs   []builder.Output
	cacheFrom []builder.CacheSpec
	cacheTo   []builder.CacheSpec
	comp      string // the build's own layer compression (both: gzip, --push adds zstd)
	maxLayer  int64
	progress  builder.ProgressMode
	// checkRules are --check's (nil: no check); signKey is --sign-key's.
	checkRules *analyze.Rules
	signKey    *sign.Signer
	// erofsTo is --format erofs's REF-erofs (empty: none), erofsComp the
	// compression inside its layers.
	erofsTo   string
	erofsComp erofs.Compression
}

// parseBuildFlags checks kiln build's flags; every mistake is a usage
// error (exit 2) naming the flag.
func parseBuildFlags(opts *BuildOptions) (*buildFlags, error) {
	// The one --progress vocabulary, and BuildKit's rawjson (not shown).
	progress, err := builder.ParseProgress(opts.Progress)
	if err != nil {
		return nil, cmdutil.UsageErr("%v", err)
	}
	opts.Progress = cmdutil.NormalizeProgress(opts.Progress)
	comp := opts.Compression
	switch comp {
	case "zstd", "gzip", "none":
	case "both":
		comp = "gzip" // --push adds the zstd variant
	default:
		return nil, cmdutil.UsageErr("--compression: %q is not one of both, gzip, zstd, none", opts.Compression)
	}
	maxLayer, err := bytesize.Parse(opts.MaxLayerSize)
	if err != nil {
		return nil, cmdutil.UsageErr("--max-layer-size: %v", err)
	}
	if opts.DryRun && opts.Dockerfile {
		return nil, cmdutil.UsageErr("--dry-run and --dockerfile print different things; pick one")
	}
	switch opts.Provenance {
	case "", "none", "false":
		opts.Provenance = ""
	case "min", "max":
	default:
		return nil, cmdutil.UsageErr("--provenance %q: want min, max or none", opts.Provenance)
	}
	if opts.BuilderID != "" && opts.Provenance == "" {
		return nil, cmdutil.UsageErr("--builder-id needs --provenance min or max")
	}
	if opts.SBOM && opts.Push == "" && opts.Provenance == "" {
		return nil, cmdutil.UsageErr("--sbom needs --push (attached next to the pushed image) or --provenance (attested beside the image in its index)")
	}
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
	var cacheFrom, cacheTo []builder.CacheSpec
	for _, s := range opts.CacheFrom {
		c, err := builder.ParseCacheSpec(s, false)
		if err != nil {
			return nil, cmdutil.UsageErr("--cache-from: %v", err)
		}
		cacheFrom = append(cacheFrom, c)
	}
	for _, s := range opts.CacheTo {
		c, err := builder.ParseCacheSpec(s, true)
		if err != nil {
			return nil, cmdutil.UsageErr("--cache-to: %v", err)
		}
		cacheTo = append(cacheTo, c)
	}
	for _, p := range opts.Platforms {
		if _, err := builder.ParsePlatform(p); err != nil {
			return nil, cmdutil.UsageErr("--platform: %v", err)
		}
	}

	fl := &buildFlags{outputs: outputs, cacheFrom: cacheFrom, cacheTo: cacheTo, comp: comp, maxLayer: maxLayer, progress: progress}
	if fl.erofsComp, err = erofs.ParseCompression(opts.Erofs); err != nil {
		return nil, cmdutil.UsageErr("--erofs-compression: %v", err)
	}
	switch opts.Format {
	case "oci", "":
	case "erofs":
		if opts.Push == "" {
			return nil, cmdutil.UsageErr("--format erofs needs --push: the EROFS image is converted from the pushed one and pushed beside it (or run kiln convert --format erofs on an OCI layout)")
		}
		if len(opts.Platforms) > 1 {
			return nil, cmdutil.UsageErr("--format erofs: one --platform at a time (an EROFS image is one platform's filesystem)")
		}
		if fl.erofsTo, err = cmdutil.ErofsDest(opts.Push, nil); err != nil {
			return nil, cmdutil.UsageErr("--format erofs: %v", err)
		}
	default:
		return nil, cmdutil.UsageErr("--format: %q is not one of oci, erofs", opts.Format)
	}
	if opts.Check != "" {
		if len(outputs) == 0 {
			return nil, cmdutil.UsageErr("--check needs --push or --to: it analyzes the image the build wrote")
		}
		if fl.checkRules, err = analyze.LoadRules(opts.Check); err != nil {
			return nil, cmdutil.UsageErr("--check: %v", err)
		}
	}
	if err := explainUsage(opts); err != nil {
		return nil, err
	}
	if opts.Rebuild && opts.SkipExisting {
		return nil, cmdutil.UsageErr("--rebuild and --skip-existing say opposite things; pick one (reusing is the default)")
	}
	if opts.SkipExisting {
		fmt.Fprintln(opts.IO.ErrOut, "kiln: --skip-existing is deprecated and does nothing: with --push a no-op rebuild answers from the content tag by default (--rebuild opts out)")
	}
	if opts.SignKey != "" && opts.Push == "" {
		return nil, cmdutil.UsageErr("--sign-key needs --push: the signature is stored next to the pushed image")
	}
	if fl.signKey, err = opts.SignFlag.LoadSigner(); err != nil {
		return nil, err
	}
	return fl, nil
}

// signAll signs every manifest the build pushed (--sign-key; k nil:
// none): BuildKit wrote them, publish signs them as it signs what slim,
// convert and weights strip write.
func signAll(ctx context.Context, opts *BuildOptions, k *sign.Signer, pushed []builder.Pushed) ([]*sign.Signed, error) {
	if k == nil {
		return nil, nil
	}
	pub := publish.WithSign(publish.Writer(), opts.SignFlag.Signer(k, opts.registryOptions()))
	var signed []*sign.Signed
	for _, p := range pushed {
		h, err := v1.NewHash(p.Digest)
		if err != nil {
			return nil, fmt.Errorf("--sign-key: pushed %s: %v", p.Ref, err)
		}
		res, err := pub.Publish(ctx, publish.Pushed(h), p.Ref)
		if err != nil {
			return nil, err
		}
		signed = append(signed, res.Signed)
	}
	return signed, nil
}

func runBuild(ctx context.Context, opts *BuildOptions) error {
	opts.lopts = registry.Pooled(opts.registryOptions())
	fl, err := parseBuildFlags(opts)
	if err != nil {
		return err
	}
	plan, in, dir, err := buildInputs(ctx, opts)
	if err != nil {
		return err
	}
	if fl.wheels, err = wheelCache(opts, fl.signKey); err != nil {
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
		return dryRun(ctx, opts, plan, in)
	}
	if fl.erofsTo != "" {
		if err := erofs.Check(ctx); err != nil {
			return err
		}
	}
	// The earlier image is read before the build moves its tag.
	ex, err := startExplain(ctx, opts, plan, in)
	if err != nil {
		return err
	}
	content, res, err := answerExisting(ctx, opts, fl, plan, in, dir)
	if err != nil {
		return err
	}
	var lock *recipes.Lock
	if opts.SBOM && opts.Locked {
		if lock, err = recipes.ReadLock(recipes.LockPath(cmdutil.RecipeFile(opts.File))); err != nil {
			return fmt.Errorf("--sbom: %w", err)
		}
	}
	var attest func(context.Context, string, sbom.Files) ([]builder.Attestation, error)
	if opts.SBOM && opts.Provenance != "" {
		attest = builder.SBOMAttestations(opts.Push, plan, lock, in, opts.Version)
	}
	if res != nil {
		fmt.Fprintf(opts.IO.ErrOut, "kiln: up to date: %s was built from these inputs (%s); --rebuild builds again\n", res.Digest, res.ContentTag)
	} else if res, err = build(ctx, opts, fl, plan, in, dir, attest); err != nil {
		return err
	}
	if content != nil && !res.Reused {
		if err := content.TagPushed(ctx); err != nil {
			return err
		}
		res.ContentTag, res.InputsDigest = content.Tag.String(), content.Digest
		fmt.Fprintf(opts.IO.ErrOut, "kiln: content tag %s\n", content.Tag)
	}
	var erofsPushed []builder.Pushed
	if fl.erofsTo != "" {
		p, err := pushErofs(ctx, opts, fl, res.Pushed)
		if err != nil {
			return err
		}
		res.Pushed = append(res.Pushed, p)
		erofsPushed = res.Pushed[len(res.Pushed)-1:]
	}
	var sboms []string
	if opts.SBOM {
		// With --provenance the SBOM is attested inside each pushed index;
		// the EROFS image, pushed by kiln, gets it as a referrer.
		bomFor := res.Pushed
		if attest != nil {
			bomFor = erofsPushed
		}
		if sboms, err = builder.AttachSBOMs(ctx, bomFor, plan, lock, in, opts.Version, opts.registryOptions()); err != nil {
			return err
		}
	}
	signed, err := signAll(ctx, opts, fl.signKey, res.Pushed)
	if err != nil {
		return err
	}
	if fl.checkRules != nil {
		if err := checkBuilt(ctx, opts, plan, res.Digest, fl.outputs[0], fl.checkRules); err != nil {
			return err
		}
	}
	explained, err := ex.finish(ctx, opts, res)
	if err != nil {
		return err
	}
	writeBuildReport(opts, plan, res, signed, sboms, attest != nil, explained)
	return nil
}

// pushErofs converts the image the build pushed (the zstd one when there
// are two: the same tars) into native EROFS layers and pushes it to
// --push's REF-erofs, returning it as one more pushed image for --sbom and
// --sign-key.
func pushErofs(ctx context.Context, opts *BuildOptions, fl *buildFlags, pushed []builder.Pushed) (builder.Pushed, error) {
	if len(pushed) == 0 {
		return builder.Pushed{}, fmt.Errorf("--format erofs: the build pushed nothing to convert")
	}
	src := pushed[len(pushed)-1]
	if len(src.Images) > 1 {
		return builder.Pushed{}, cmdutil.UsageErr("--format erofs: the build pushed %d platforms; build one --platform at a time", len(src.Images))
	}
	digest := src.Digest
	for _, d := range src.Images {
		// An index of the image and its attestations: the image itself.
		digest = d
	}
	lopts := opts.registryOptions()
	r, err := layers.ParseRef(src.Ref, lopts...)
	if err != nil {
		return builder.Pushed{}, err
	}
	ref := r.Name.Context().String() + "@" + digest
	li, err := layers.Open(ctx, ref, lopts...)
	if err != nil {
		return builder.Pushed{}, err
	}
	defer li.Close()
	img, err := li.V1(ctx)
	if err != nil {
		return builder.Pushed{}, err
	}
	fmt.Fprintf(opts.IO.ErrOut, "kiln: converting %s to EROFS (%s inside)\n", ref, fl.erofsComp)
	res, err := convert.ToErofs(ctx, img, convert.Options{}, fl.erofsComp)
	if err != nil {
		return builder.Pushed{}, fmt.Errorf("--format erofs: %w", err)
	}
	defer res.Close()
	dg, err := layers.Write(ctx, res.Image, fl.erofsTo, lopts...)
	if err != nil {
		return builder.Pushed{}, err
	}
	return builder.Pushed{Ref: fl.erofsTo, Compression: "erofs", Digest: dg.String()}, nil
}

// build solves the plan on the BuildKit daemon the flags name, after
// checking where the image goes.
func build(ctx context.Context, opts *BuildOptions, fl *buildFlags, plan *recipes.Plan, in builder.Inputs, dir string, attest func(context.Context, string, sbom.Files) ([]builder.Attestation, error)) (*builder.Result, error) {
	outputs, cacheFrom, cacheTo, comp, maxLayer := fl.outputs, fl.cacheFrom, fl.cacheTo, fl.comp, fl.maxLayer
	if len(outputs) == 0 && len(cacheTo) == 0 {
		fmt.Fprintln(opts.IO.ErrOut, "warning: no --push or --to: the image is built and tested but stays in the builder's cache")
	}
	// Where the image goes is checked before the build, not after it.
	for _, out := range outputs {
		flag := "--output"
		if out.Pushes() {
			flag = "--push"
		}
		if err := layers.CheckTarget(ctx, flag, out.Ref, opts.registryOptions()...); err != nil {
			return nil, err
		}
	}
	c, addr, err := opts.BuildKit(ctx, opts.Builder, opts.TLS())
	if err != nil {
		return nil, err
	}
	defer c.Close()
	fmt.Fprintf(opts.IO.ErrOut, "kiln: building %s on %s\n", plan.Name, addr)
	res, err := builder.Build(ctx, plan, in, builder.Options{
		Client:       c,
		Platforms:    opts.Platforms,
		ContextDir:   dir,
		Outputs:      outputs,
		Compression:  comp,
		MaxLayerSize: maxLayer,
		CacheFrom:    cacheFrom,
		CacheTo:      cacheTo,
		Progress:     fl.progress,
		ProgressOut:  opts.IO.ErrOut,
		NoProbes:     opts.NoTest,
		Insecure:     opts.Insecure,
		Registry:     opts.registryOptions(),
		Tools:        toolsExecutable(),
		Provenance:   opts.Provenance,
		BuilderID:    opts.BuilderID,
		Params:       map[string]string{"version": opts.Version},
		Attest:       attest,
		WheelCache:   fl.wheels,
	})
	if res != nil {
		warnWheels(opts.IO.ErrOut, res.Wheels)
	}
	if err != nil {
		return nil, fmt.Errorf("build %s: %w", plan.Name, err)
	}
	return res, nil
}

// writeBuildReport prints what kiln build did: one JSON object with
// --json, else a line per fact.
func writeBuildReport(opts *BuildOptions, plan *recipes.Plan, res *builder.Result, signed []*sign.Signed, sboms []string, attested bool, explained *builder.Explanation) {
	if opts.JSON {
		_ = cmdutil.WriteJSON(opts.IO.Out, map[string]any{
			"name": plan.Name, "digest": res.Digest, "graph_digest": res.Graph,
			"push": opts.Push, "outputs": opts.Outputs, "pushed": res.Pushed, "signed": signed, "sbom": sboms,
			"provenance": cmp.Or(opts.Provenance, "none"), "attestations": attestationNames(opts.Provenance, attested),
			"vertices": res.Status.Vertices, "cached": res.Status.Cached, "executed": res.Status.Executed,
			"reused": res.Reused, "content_tag": res.ContentTag, "inputs_digest": res.InputsDigest, "explain": explained,
			"wheels": wheelUses(res.Wheels),
		})
		return
	}
	fmt.Fprintf(opts.IO.Out, "image    %s\n", orNone(res.Digest))
	if res.Reused {
		fmt.Fprintf(opts.IO.Out, "reused   %s (up to date)\n", res.ContentTag)
	} else {
		fmt.Fprintf(opts.IO.Out, "graph    %s\n", res.Graph)
		fmt.Fprintf(opts.IO.Out, "steps    %d (%d cached, %d executed)\n", res.Status.Vertices, res.Status.Cached, res.Status.Executed)
		writeWheels(opts.IO.Out, res.Wheels)
	}
	for _, p := range res.Pushed {
		fmt.Fprintf(opts.IO.Out, "pushed   %s (%s, %s)\n", p.Ref, p.Compression, p.Digest)
		for _, pl := range slices.Sorted(maps.Keys(p.Images)) {
			fmt.Fprintf(opts.IO.Out, "  image  %s %s\n", pl, p.Images[pl])
		}
	}
	if names := attestationNames(opts.Provenance, attested); len(names) > 0 {
		fmt.Fprintf(opts.IO.Out, "attested %s\n", strings.Join(names, ", "))
	}
	for _, s := range signed {
		fmt.Fprintf(opts.IO.Out, "signed   %s (key %s, %s)\n", s.Ref, s.KeyID, s.Format)
	}
	for _, o := range opts.Outputs {
		p := o
		if abs, err := filepath.Abs(strings.SplitN(o, ":", 2)[1]); err == nil {
			p = strings.SplitN(o, ":", 2)[0] + ":" + abs
		}
		fmt.Fprintf(opts.IO.Out, "wrote    %s\n", p)
	}
	if explained != nil {
		writeExplain(opts.IO.Out, explained)
	}
}

// attestationNames lists what the attestation manifest beside each image
// holds: the provenance and kiln's own statements.
func attestationNames(prov string, bom bool) []string {
	var out []string
	if prov != "" {
		// builder adds kiln's parameters beside every provenance.
		out = append(out, "SLSA provenance v1 (mode="+prov+")", "kiln-build.json ("+builder.KilnParamsPredicateType+")")
	}
	if bom {
		out = append(out, "sbom.cdx.json ("+sbom.PredicateType+")", "sbom.spdx.json ("+sbom.SPDXPredicateType+")")
	}
	return out
}

// checkBuilt analyzes what the build wrote (the first output) against the
// --check rules, requiring kernels for the recipe's GPUs.
func checkBuilt(ctx context.Context, opts *BuildOptions, plan *recipes.Plan, digest string, out builder.Output, rules *analyze.Rules) error {
	ref := "oci:" + out.Ref.Path
	switch out.Ref.Kind {
	case layers.KindRegistry:
		ref = out.Ref.Name.Context().String() + "@" + digest
	case layers.KindDockerArchive:
		ref = "docker-archive:" + out.Ref.Path
	}
	for _, g := range plan.GPUs {
		rules.RequireGPUs = append(rules.RequireGPUs, g.Name)
	}
	img, err := layers.Open(ctx, ref, opts.registryOptions()...)
	if err != nil {
		return fmt.Errorf("--check: %w", err)
	}
	defer img.Close()
	progress := "auto"
	if opts.Progress == "none" {
		progress = "none"
	}
	rep, violations, err := cmdutil.CheckImage(ctx, opts.IO, progress, img, rules, nil, analyze.Options{})
	if err != nil {
		return fmt.Errorf("--check: %w", err)
	}
	if len(violations) == 0 {
		fmt.Fprintf(opts.IO.ErrOut, "kiln: check %s passed: %s compressed, efficiency %.2f%%, kernels for %s\n",
			opts.Check, bytesize.Format(rep.CompressedSize), 100*rep.Waste.Efficiency, gpuList(rep))
		return nil
	}
	for _, v := range violations {
		fmt.Fprintf(opts.IO.ErrOut, "  ✗ %s: %s\n", v.Rule, v.Message)
	}
	fmt.Fprintf(opts.IO.ErrOut, "kiln: %d --check rule(s) broken in %s\n", len(violations), ref)
	return cmdutil.SilentExit(cmdutil.ExitRule)
}

func gpuList(rep *analyze.Report) string {
	if rep.Kernels == nil || len(rep.Kernels.GPUs) == 0 {
		return "no target GPU"
	}
	var s []string
	for _, g := range rep.Kernels.GPUs {
		s = append(s, g.GPU+" "+g.ComputeCapability)
	}
	return strings.Join(s, ", ")
}

func orNone(s string) string {
	if s == "" {
		return "(not exported)"
	}
	return s
}

func dryRun(ctx context.Context, opts *BuildOptions, plan *recipes.Plan, in builder.Inputs) error {
	type pg struct {
		Platform string `json:"platform"`
		Digest   string `json:"graph_digest"`
		Ops      int    `json:"ops"`
	}
	gs, err := builder.Graphs(plan, in, opts.Platforms)
	if err != nil {
		return err
	}
	var graphs []pg
	var layout *builder.Layout
	for _, g := range gs {
		layout = g.Layout
		def, err := g.Marshal(ctx, g.Target(opts.NoTest))
		if err != nil {
			return err
		}
		graphs = append(graphs, pg{Platform: builder.PlatformString(g.Platform), Digest: builder.DefinitionDigest(def), Ops: len(def.Def)})
	}
	if layout == nil {
		return errors.New("no platform to build")
	}
	if opts.JSON {
		var steps []map[string]string
		for _, st := range []builder.Stage{layout.Devel, layout.Runtime} {
			for _, s := range st.Steps {
				steps = append(steps, map[string]string{"stage": st.Name, "name": s.Name, "component": string(s.Component)})
			}
		}
		return cmdutil.WriteJSON(opts.IO.Out, map[string]any{"plan": plan, "graphs": graphs, "steps": steps, "tests": cmdutil.NonNil(layout.Probes)})
	}
	// Within the terminal's width (80 columns in a pipe): a value too long
	// wraps under itself; the full values are in --json.
	width := cmdutil.TermWidth(opts.IO.Out)
	var b strings.Builder
	plan.WriteTable(&b)
	termtable.Labeled(opts.IO.Out, width, 14, b.String())
	fmt.Fprintln(opts.IO.Out)
	for _, st := range []builder.Stage{layout.Devel, layout.Runtime} {
		termtable.Fprintw(opts.IO.Out, width, "stage "+st.Name+"  ", "        ", "FROM "+st.Base)
		for _, s := range st.Steps {
			c := ""
			if s.Component != "" {
				c = "  [layer: " + string(s.Component) + "]"
			}
			termtable.Fprintw(opts.IO.Out, width, "  - ", "    ", s.Name+c)
		}
	}
	for _, t := range layout.Probes {
		termtable.Fprintw(opts.IO.Out, width, "test  ", "      ", t)
	}
	for _, g := range graphs {
		fmt.Fprintf(opts.IO.Out, "graph %s  %s (%d ops)\n", g.Platform, termtable.Digest(g.Digest), g.Ops)
	}
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
		mirrors, _ := opts.RecipeFlags.MirrorOptions(opts.IO) // refused, if at all, by ResolverOptions
		return append([]registry.Option{registry.WithInsecureRegistries(opts.Insecure...)}, mirrors...)
	}
	return opts.lopts
}
