package buildcmd

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/sirupsen/logrus"
	"github.com/spf13/cobra"

	"github.com/kiln-build/kiln/analyze"
	"github.com/kiln-build/kiln/builder"
	"github.com/kiln-build/kiln/cmd/kiln/internal/cmdutil"
	"github.com/kiln-build/kiln/convert"
	"github.com/kiln-build/kiln/internal/bytesize"
	"github.com/kiln-build/kiln/internal/preflight"
	"github.com/kiln-build/kiln/layers"
	"github.com/kiln-build/kiln/layers/erofs"
	"github.com/kiln-build/kiln/recipes"
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
	SkipExisting bool
	Check        string
	Epoch        string // SOURCE_DATE_EPOCH; "" = $SOURCE_DATE_EPOCH, else 0
	Insecure     []string
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
}

func NewCmdBuild(f *cmdutil.Factory) *cobra.Command {
	ios := f.IO
	opts := &BuildOptions{IO: ios, Version: f.Version}
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
one platform at a time. It needs mkfs.erofs (erofs-utils 1.7 or later).

The daemon: --builder, else $BUILDKIT_HOST (either one named is used or the
build fails; kiln never falls back from it), else
unix:///run/kiln-buildkit/buildkitd.sock, else /run/buildkit/buildkitd.sock.
Docker users have one already: --builder docker-container://buildx_buildkit_default
(docker buildx create --node default --driver docker-container --bootstrap
starts that container). Without Docker: sudo bash scripts/buildkitd.sh start`,
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
			return runBuild(cmd.Context(), opts)
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
	fl.BoolVar(&opts.SkipExisting, "skip-existing", false, "with --push: skip the build when an image built from the same inputs (lock, bases by digest, graph, app files) is already in the repository; also tags each push with that content address")
	fl.StringVar(&opts.Epoch, "source-date-epoch", "", "timestamp for layers and config (default $SOURCE_DATE_EPOCH, else 0)")
	fl.StringSliceVar(&opts.Insecure, "insecure-registry", nil, "registry host that speaks plain HTTP for --push (loopback always may)")
	opts.SignFlag.Register(cmd)
	fl.BoolVar(&opts.SBOM, "sbom", false, "attach a CycloneDX (and SPDX) SBOM of the build's pinned inputs (lock: base images by digest, wheels with SHA-256; plan: CUDA/cuDNN/torch, GPU architectures; recipe and lock digests): with --provenance in the attestation manifest beside each image, as BuildKit stores SBOMs; else (--push only) as a referrer, keeping the image's digest reproducible")
	fl.StringVar(&opts.Provenance, "provenance", "none", "attach BuildKit's SLSA v1 provenance: max (every step's definition), min (the request), none; kiln's recipe and lock digests are among its parameters. The pushed index's digest then changes per build (the provenance records start time and invocation ID); the image manifests inside stay reproducible")
	fl.StringVar(&opts.BuilderID, "builder-id", "", "with --provenance: the provenance's builder.id, a URI naming who ran the build (e.g. the CI job's URL)")
	opts.RecipeFlags.Register(cmd)
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
		if b, err := os.ReadFile(lp); err == nil {
			s := sha256.Sum256(b)
			in.LockDigest = "sha256:" + hex.EncodeToString(s[:])
		}
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
	return plan, in, r.Dir(), nil
}

// buildFlags is what kiln build's flags say, checked before any work:
// where the image goes, the caches, the layer encoding and size cap.
type buildFlags struct {
	outputs   []builder.Output
	cacheFrom []builder.CacheSpec
	cacheTo   []builder.CacheSpec
	comp      string // the build's own layer compression (both: gzip, --push adds zstd)
	maxLayer  int64
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
	if opts.Progress != "rawjson" {
		if err := cmdutil.CheckProgress(opts.Progress); err != nil {
			return nil, err
		}
		opts.Progress = cmdutil.NormalizeProgress(opts.Progress)
	}
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
		ref, err := layers.ParseRef(opts.Push)
		if err != nil {
			return nil, cmdutil.UsageErr("--push: %v", err)
		}
		if ref.Kind != layers.KindRegistry {
			return nil, cmdutil.UsageErr("--push %s: want a registry reference; use --to for %s", opts.Push, ref.Kind)
		}
		outputs = append(outputs, builder.Output{Type: "image", Path: opts.Push})
		if opts.Compression == "both" {
			zd, err := cmdutil.ZstdDest(opts.Push, nil)
			if err != nil {
				return nil, cmdutil.UsageErr("--compression both: %v", err)
			}
			outputs = append(outputs, builder.Output{Type: "image", Path: zd, Compression: "zstd"})
		}
	}
	for _, o := range opts.Outputs {
		ref, err := layers.ParseRef(o)
		if err != nil {
			return nil, cmdutil.UsageErr("--to: %v", err)
		}
		switch ref.Kind {
		case layers.KindOCILayout:
			outputs = append(outputs, builder.Output{Type: "oci", Path: ref.Path})
		case layers.KindDockerArchive:
			outputs = append(outputs, builder.Output{Type: "docker-archive", Path: ref.Path})
		default:
			return nil, cmdutil.UsageErr("--to %s: want oci:DIR or docker-archive:FILE (use --push for a registry)", o)
		}
	}
	if len(opts.Outputs) > 1 {
		for _, o := range outputs {
			if o.Type == "oci" {
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

	fl := &buildFlags{outputs: outputs, cacheFrom: cacheFrom, cacheTo: cacheTo, comp: comp, maxLayer: maxLayer}
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
		if opts.SkipExisting {
			return nil, cmdutil.UsageErr("--format erofs and --skip-existing: an existing build's EROFS image is not looked up yet; run kiln convert --format erofs on it instead")
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
	if opts.SkipExisting && opts.Push == "" {
		return nil, cmdutil.UsageErr("--skip-existing needs --push: the content-addressed tag lives in the pushed repository")
	}
	if opts.SignKey != "" && opts.Push == "" {
		return nil, cmdutil.UsageErr("--sign-key needs --push: the signature is stored next to the pushed image")
	}
	if fl.signKey, err = opts.SignFlag.LoadSigner(); err != nil {
		return nil, err
	}
	return fl, nil
}

// signAll signs every manifest the build pushed (--sign-key; k nil: none).
func signAll(ctx context.Context, opts *BuildOptions, k *sign.Signer, pushed []builder.Pushed) ([]*sign.Signed, error) {
	if k == nil {
		return nil, nil
	}
	var signed []*sign.Signed
	for _, p := range pushed {
		h, err := v1.NewHash(p.Digest)
		if err != nil {
			return nil, fmt.Errorf("--sign-key: pushed %s: %v", p.Ref, err)
		}
		s, err := opts.SignFlag.SignPushed(ctx, k, p.Ref, h, []layers.Option{layers.WithInsecureRegistries(opts.Insecure...)})
		if err != nil {
			return nil, err
		}
		signed = append(signed, s)
	}
	return signed, nil
}

func runBuild(ctx context.Context, opts *BuildOptions) error {
	fl, err := parseBuildFlags(opts)
	if err != nil {
		return err
	}
	outputs, cacheFrom, cacheTo, comp, maxLayer := fl.outputs, fl.cacheFrom, fl.cacheTo, fl.comp, fl.maxLayer
	plan, in, dir, err := buildInputs(ctx, opts)
	if err != nil {
		return err
	}
	if len(opts.Platforms) > 0 {
		plan.Platforms = opts.Platforms
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
	var content *builder.Content
	if opts.SkipExisting {
		content, err = findContentTag(ctx, opts, plan, in, dir, maxLayer)
		if err != nil {
			return err
		}
		if content.Existing != nil {
			return reuseExisting(ctx, opts, content)
		}
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
	if len(outputs) == 0 && len(cacheTo) == 0 {
		fmt.Fprintln(opts.IO.ErrOut, "warning: no --push or --to: the image is built and tested but stays in the builder's cache")
	}
	// containerd's content store warns through logrus (e.g. about fsverity
	// on the output directory); kiln's own messages are enough.
	logrus.SetLevel(logrus.ErrorLevel)
	if fl.erofsTo != "" {
		if err := erofs.Check(ctx); err != nil {
			return err
		}
	}
	// Where the image goes is checked before the build, not after it.
	for _, out := range outputs {
		raw, flag := out.Path, "--push"
		switch out.Type {
		case "image":
		case "oci", "docker-archive":
			raw, flag = out.Type+":"+out.Path, "--output"
		default:
			continue
		}
		ref, err := layers.ParseRef(raw, layers.WithInsecureRegistries(opts.Insecure...))
		if err == nil {
			err = preflight.Target(ctx, flag, ref, layers.WithInsecureRegistries(opts.Insecure...))
		}
		if err != nil {
			return err
		}
	}
	c, addr, err := builder.Connect(ctx, opts.Builder, opts.TLS())
	if err != nil {
		return err
	}
	defer c.Close()
	fmt.Fprintf(opts.IO.ErrOut, "kiln: building %s on %s\n", plan.Name, addr)
	res, err := builder.Build(ctx, plan, in, builder.Options{
		Client:       c,
		ContextDir:   dir,
		Outputs:      outputs,
		Compression:  comp,
		MaxLayerSize: maxLayer,
		CacheFrom:    cacheFrom,
		CacheTo:      cacheTo,
		Progress:     buildkitProgress(opts.Progress),
		ProgressOut:  opts.IO.ErrOut,
		NoProbes:     opts.NoTest,
		Insecure:     opts.Insecure,
		Tools:        toolsExecutable(),
		Provenance:   opts.Provenance,
		BuilderID:    opts.BuilderID,
		Params:       map[string]string{"version": opts.Version},
		Attest:       attest,
	})
	if err != nil {
		return fmt.Errorf("build %s: %w", plan.Name, err)
	}
	if content != nil {
		if err := content.TagPushed(ctx); err != nil {
			return err
		}
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
		if sboms, err = builder.AttachSBOMs(ctx, bomFor, plan, lock, in, opts.Version, []layers.Option{layers.WithInsecureRegistries(opts.Insecure...)}); err != nil {
			return err
		}
	}
	signed, err := signAll(ctx, opts, fl.signKey, res.Pushed)
	if err != nil {
		return err
	}
	if fl.checkRules != nil {
		if err := checkBuilt(ctx, opts, plan, res.Digest, outputs[0], fl.checkRules); err != nil {
			return err
		}
	}
	writeBuildReport(opts, plan, res, signed, sboms, attest != nil)
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
	lopts := []layers.Option{layers.WithInsecureRegistries(opts.Insecure...)}
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

// writeBuildReport prints what kiln build did: one JSON object with
// --json, else a line per fact.
func writeBuildReport(opts *BuildOptions, plan *recipes.Plan, res *builder.Result, signed []*sign.Signed, sboms []string, attested bool) {
	if opts.JSON {
		_ = cmdutil.WriteJSON(opts.IO.Out, map[string]any{
			"name": plan.Name, "digest": res.Digest, "graph_digest": res.Graph,
			"push": opts.Push, "outputs": opts.Outputs, "pushed": res.Pushed, "signed": signed, "sbom": sboms,
			"provenance": cmp.Or(opts.Provenance, "none"), "attestations": attestationNames(opts.Provenance, attested),
			"vertices": res.Status.Vertices, "cached": res.Status.Cached, "executed": res.Status.Executed,
		})
		return
	}
	fmt.Fprintf(opts.IO.Out, "image    %s\n", orNone(res.Digest))
	fmt.Fprintf(opts.IO.Out, "graph    %s\n", res.Graph)
	fmt.Fprintf(opts.IO.Out, "steps    %d (%d cached, %d executed)\n", res.Status.Vertices, res.Status.Cached, res.Status.Executed)
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
	var ref string
	switch out.Type {
	case "image":
		r, err := layers.ParseRef(out.Path)
		if err != nil {
			return err
		}
		ref = r.Name.Context().String() + "@" + digest
	case "oci":
		ref = "oci:" + out.Path
	default:
		ref = "docker-archive:" + out.Path
	}
	for _, g := range plan.GPUs {
		rules.RequireGPUs = append(rules.RequireGPUs, g.Name)
	}
	img, err := layers.Open(ctx, ref, layers.WithInsecureRegistries(opts.Insecure...))
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
	gs, err := builder.Graphs(plan, in, nil)
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
	plan.WriteTable(opts.IO.Out)
	fmt.Fprintln(opts.IO.Out)
	for _, st := range []builder.Stage{layout.Devel, layout.Runtime} {
		fmt.Fprintf(opts.IO.Out, "stage %s  FROM %s\n", st.Name, st.Base)
		for _, s := range st.Steps {
			c := ""
			if s.Component != "" {
				c = "  [layer: " + string(s.Component) + "]"
			}
			fmt.Fprintf(opts.IO.Out, "  - %s%s\n", s.Name, c)
		}
	}
	for _, t := range layout.Probes {
		fmt.Fprintf(opts.IO.Out, "test  %s\n", t)
	}
	for _, g := range graphs {
		fmt.Fprintf(opts.IO.Out, "graph %s  %s (%d ops)\n", g.Platform, g.Digest, g.Ops)
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

// buildkitProgress names kiln's --progress word as BuildKit's progress
// display takes it (none is BuildKit's quiet).
func buildkitProgress(mode string) string {
	if mode == "none" {
		return "quiet"
	}
	return mode
}
