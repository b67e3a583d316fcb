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
	"github.com/kiln-build/kiln/cmd/kiln/internal/verbkit"
	"github.com/kiln-build/kiln/layers"
	"github.com/kiln-build/kiln/layers/erofs"
	"github.com/kiln-build/kiln/recipes"
	"github.com/kiln-build/kiln/registry"
	"github.com/kiln-build/kiln/slim"
)

// BuildOptions are kiln build's inputs.
type BuildOptions struct {
	// Version is kiln\'s, recorded in what the command attaches (SBOM, provenance).
	Version string
	IO      *cmdutil.IO
	File    string
	Locked  bool
	JSON    bool
	Epoch   string // SOURCE_DATE_EPOCH; "" = $SOURCE_DATE_EPOCH, else 0
	// Flags are the build's own (--push, --to, --compression, ...):
	// builder.Flags.Parse checks them.
	builder.Flags
	verbkit.BuilderFlags
	// lopts is the run's registry options (registryOptions).
	lopts []registry.Option
	verbkit.SignFlag
	verbkit.RecipeFlags
	// BuildKit connects to the builder (Factory.Connect).
	BuildKit func(ctx context.Context, addr string, tls builder.TLS) (*client.Client, string, error)
	verbkit.WheelCacheFlags
}

// NewCmdBuild is kiln build [FILE].
// runF, when not nil, gets the parsed options instead of the
// command running (tests stop there).
func NewCmdBuild(f *verbkit.Factory, runF func(*BuildOptions) error) *cobra.Command {
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
	fl.StringVar(&opts.Compression, "compression", "both", verbkit.CompressionHelp+", or none (uncompressed)")
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
	file := verbkit.RecipeFile(opts.File)
	var in builder.Inputs
	r, err := recipes.Load(file)
	if err != nil {
		return nil, in, nil, "", verbkit.RecipeLoadErr(err)
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
			return nil, in, nil, "", verbkit.Refusal(opts.IO, opts.JSON, err)
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
	lopts := opts.registryOptions()
	ro, rules, err := opts.Flags.Parse(lopts)
	if err != nil {
		return nil, nil, usageErr(err)
	}
	opts.Progress = cmdutil.NormalizeProgress(opts.Progress)
	if opts.SkipExisting {
		cmdutil.Notef(opts.IO.ErrOut, "--skip-existing is deprecated and does nothing: with --push a no-op rebuild answers from the content tag by default (--rebuild opts out)")
	}
	if opts.SignKey != "" && opts.Push == "" {
		return nil, nil, cmdutil.UsageErr("--sign-key needs --push: the signature is stored next to the pushed image")
	}
	key, err := opts.SignFlag.LoadSigner()
	if err != nil {
		return nil, nil, err
	}
	ro.Signer, ro.Version, ro.Tools = opts.SignFlag.Signer(key, lopts), opts.Version, toolsExecutable()
	ro.ProgressOut, ro.Params = opts.IO.ErrOut, map[string]string{"version": opts.Version}
	ro.Connect = func(ctx context.Context) (*client.Client, string, error) {
		return opts.BuildKit(ctx, opts.Builder, opts.TLS())
	}
	return ro, rules, nil
}

// usageErr is err with exit 2 when builder says it is a usage mistake.
func usageErr(err error) error {
	if ue := (*builder.UsageError)(nil); errors.As(err, &ue) {
		return cmdutil.Exit(cmdutil.ExitUsage, ue.Err)
	}
	return err
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
		ro.Check = func(ctx context.Context, ref layers.Ref) error { return checkBuilt(ctx, opts, plan, ref, rules) }
	}
	rep, err := builder.Run(ctx, *ro)
	if err != nil {
		return usageErr(err)
	}
	if opts.JSON {
		_ = cmdutil.WriteJSON(opts.IO.Out, rep.JSON())
		return nil
	}
	rep.WriteText(opts.IO.Out)
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
