package slimcmd

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"

	"github.com/moby/buildkit/client"
	"github.com/sirupsen/logrus"
	"github.com/spf13/cobra"

	"github.com/kiln-build/kiln/builder"
	"github.com/kiln-build/kiln/cmd/kiln/internal/cmdutil"
	"github.com/kiln-build/kiln/cmd/kiln/internal/verbkit"
	"github.com/kiln-build/kiln/fatbin"
	"github.com/kiln-build/kiln/internal/bytesize"
	"github.com/kiln-build/kiln/internal/preflight"
	"github.com/kiln-build/kiln/internal/scratch"
	"github.com/kiln-build/kiln/internal/termtable"
	"github.com/kiln-build/kiln/layers"
	"github.com/kiln-build/kiln/layers/erofs"
	"github.com/kiln-build/kiln/registry"
	"github.com/kiln-build/kiln/sbom"
	"github.com/kiln-build/kiln/sign"
	"github.com/kiln-build/kiln/slim"
	"github.com/kiln-build/kiln/weights"
	"github.com/kiln-build/kiln/weights/strip"
)

// SlimOptions are kiln slim's inputs.
type SlimOptions struct {
	// Version is kiln\'s, recorded in what the command attaches (SBOM, provenance).
	Version       string
	IO            *cmdutil.IO
	Image         string
	To            string
	Policy        string
	Level         int
	Compression   string
	Format        string
	StartupList   string
	Erofs         string
	MaxLayerSize  string
	Force         bool
	PruneLibs     bool
	Probe         string
	ProbeRegistry string
	WeightsTo     string
	WeightsMount  string
	JSON          bool
	Jobs          int
	NoVerify      bool
	Progress      string
	WorkDir       string
	GPUs          []string
	KeepPTX       bool
	PruneNVIDIA   bool
	// SBOM is --sbom: write each destination as an index holding the
	// image and a CycloneDX attestation (BuildKit's layout).
	SBOM bool
	verbkit.SignFlag
	verbkit.ImageFlags
	verbkit.BuilderFlags
	// BuildKit connects to the builder --probe runs on (Factory.Connect).
	BuildKit func(ctx context.Context, addr string, tls builder.TLS) (*client.Client, string, error)
}

// NewCmdSlim is kiln slim IMAGE --to DEST.
// runF, when not nil, gets the parsed options instead of the
// command running (tests stop there).
func NewCmdSlim(f *verbkit.Factory, runF func(*SlimOptions) error) *cobra.Command {
	ios := f.IO
	opts := &SlimOptions{IO: ios, ImageFlags: f.ImageFlags(), Version: f.Version, BuildKit: f.Connect}
	cmd := &cobra.Command{
		Use:   "slim IMAGE --to DEST",
		Short: "Rewrite an image without what it does not need at run time",
		Long: `Rewrites an image without a daemon or a rebuild: reads every layer as a
stream (twice: once to squash and classify, once to write), drops the file
classes the policy names (the classes kiln analyze reports), collapses files
that later layers overwrote or deleted, keeps one copy of CUDA libraries
installed twice (the other becomes a symlink), and regroups what is left
into layers ordered by how often they change: OS, CUDA libraries, Python
packages, application. A group larger than --max-layer-size is split by
files, in path order, into several layers, so pulls download and unpack in
parallel instead of waiting on one big layer; an application change still
re-pushes only the application layer. The same input and policy give the
same digest.

--compression both (the default) publishes the image twice from one run:
gzip under the destination's name, which every Docker and containerd pulls
(platforms that pull your image themselves may run Docker 20.10), and zstd
under NAME-zstd, which kiln warm prefers and Docker >= 23.0 / containerd >=
1.5 pull faster (an untagged oci:DIR gets the tags latest and latest-zstd).
A docker-archive destination holds plain tar layers, as
docker save writes them, which every docker load reads.

--format erofs publishes, beside those, the image with native EROFS layers
(application/vnd.erofs.layer.v1) under NAME-erofs: each layer a filesystem
image that containerd's EROFS snapshotter mounts as it is, with no untar at
a cold start, compressed inside (--erofs-compression, lz4hc by default), so
the GPU code --gpus zeroed costs no disk. It is converted from the same
layers (--probe runs the tar image), signed and SBOM'd like the others, and
the same input gives the same digest. It needs mkfs.erofs and fsck.erofs
(erofs-utils 1.7 or later).

Policies: the built-in "runtime" drops the toolkit's binaries (nvcc, ptxas,
cicc, Nsight), headers, static libraries, docs and caches (pip, apt, conda,
__pycache__); "runtime-strict" also drops shared libraries that nothing in
the image links (--prune-libs adds that to any policy), the C++ test
programs Debian's torch ships and the system's message translations;
"weights" only moves weights out. --policy FILE reads YAML (docs/slim.md).

--prune-libs follows DT_NEEDED from every kept program, Python extension
module and application object (plus libraries known to be dlopen'ed) and
drops the libraries of the dynamic linker's directories outside that
closure. Code that dlopens other libraries by name is invisible to it: run
it with a --probe that exercises the application.

Weights leave the image only with --weights-to: they become a kiln weights
volume (artifact + manifest) and the image gets labels pointing at it.
Without it they stay, and the report says so.

Packages that compile kernels at run time (Triton, FlashInfer, DeepGEMM,
torch cpp_extension users) need nvcc and headers: kiln keeps them, or with
"jit: refuse" in the policy refuses unless --force.

--gpus h100,l4 prunes the GPU code in shared libraries' fat binaries to what
that fleet runs: per GPU the cubin that runs on it natively (sm_86 code
serves an L4's sm_89; sm_90a is kept for exactly sm_90), plus each fat
binary's newest PTX so a newer GPU still starts through JIT (--keep-ptx=false
drops it where a cubin serves the fleet). Files keep their size and every
offset: dropped code becomes zeros. Framework and extension libraries (torch,
FlashAttention, bitsandbytes, ...) by default; NVIDIA's redistributable
libraries (cuBLAS, cuDNN, NCCL, cuFFT, ...) only with --prune-nvidia-libs,
since whether their license allows modified copies is your call.

--probe CMD runs CMD in the slim image through BuildKit (--builder, else
$BUILDKIT_HOST, else the standard sockets) before anything is written to
DEST; the slim fails when the probe does. BuildKit reads the image from an
OCI layout in the work directory: nothing is pushed anywhere you did not
name (--probe-registry REG pushes it there instead, for a remote builder
that cannot read this machine's files).

Before the rewrite, slim checks what it will need at the end: that --to
(and --weights-to) can be written (a registry answers and takes kiln's
credentials for a push; a directory can be created), that BuildKit answers
when --probe is set, and that the work directory has room for the new
layers.`,
		Example: `  kiln slim 127.0.0.1:5000/kiln/naive-app:latest --to 127.0.0.1:5000/kiln/app:slim
  kiln slim docker-archive:app.tar --to oci:./slim:app --weights-to oci:./weights:app
  kiln slim IMAGE --to oci:out --probe 'python3 -c "import torch"' --json
  kiln slim IMAGE --to docker-archive:slim.tar --policy my-policy.yaml --level 9
  kiln slim IMAGE --to 127.0.0.1:5000/kiln/app:slim --compression zstd --max-layer-size 1GiB
  kiln slim IMAGE --to REPO:h100 --policy runtime-strict --gpus h100 --probe 'python3 -c "import torch"'
  kiln slim IMAGE --to 127.0.0.1:5000/kiln/app:slim --gpus h100 --format erofs`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Image = args[0]
			return cmdutil.Run(cmd.Context(), opts, runF, runSlim)
		},
	}
	opts.ImageFlags.Register(cmd)
	fl := cmd.Flags()
	fl.StringVar(&opts.To, "to", "", "destination: [REGISTRY/]REPO:TAG, oci:DIR[:TAG] or docker-archive:FILE[:TAG] (required)")
	fl.StringVar(&opts.Policy, "policy", "runtime", "built-in policy (runtime, runtime-strict, weights) or a policy YAML file")
	fl.IntVar(&opts.Level, "level", slim.DefaultLevel, "zstd level, 1 (fastest) to 22 (smallest)")
	fl.StringVar(&opts.Compression, "compression", "both", verbkit.CompressionHelp)
	fl.StringVar(&opts.Format, "format", "oci", "layer format: oci (the --compression encodings), estargz (gzip laid out for lazy pulls by the stargz snapshotter, the files --probe opened first; written to --to alone) or erofs (the --compression encodings and native EROFS layers under TAG-erofs, for containerd's EROFS snapshotter)")
	fl.StringVar(&opts.Erofs, "erofs-compression", string(erofs.DefaultCompression), "with --format erofs: the compression inside each EROFS image (none, lz4, lz4hc, zstd, lzma)")
	fl.StringVar(&opts.StartupList, "startup-list", "", "with --probe: also write the files the probe opened to this file, one a line (what --format estargz lays out first; kiln convert --format estargz --startup-list reads it)")
	fl.StringVar(&opts.MaxLayerSize, "max-layer-size", slim.DefaultMaxLayerSize, "split a layer group whose tar is larger than this into several layers by files (0: one layer per group)")
	fl.BoolVar(&opts.Force, "force", false, "drop what run-time kernel compilers need even when the policy says jit: refuse")
	fl.BoolVar(&opts.PruneLibs, "prune-libs", false, "also drop shared libraries nothing in the image links (prune_libs: unreferenced); use with a --probe that exercises the app")
	fl.StringVar(&opts.Probe, "probe", "", "command to run in the slim image through BuildKit before writing it (fails the slim when it fails)")
	fl.StringVar(&opts.ProbeRegistry, "probe-registry", envOr("KILN_PROBE_REGISTRY", ""), "with --probe: push the image to this registry for BuildKit to pull (default: BuildKit reads it from an OCI layout in the work directory, nothing is pushed)")
	opts.BuilderFlags.Register(cmd)
	fl.StringVar(&opts.WeightsTo, "weights-to", "", "move weights into a volume artifact at REF or oci:DIR[:TAG] (labels in the image point to it)")
	fl.StringVar(&opts.WeightsMount, "weights-mount", "", "where the weights volume is mounted (default: the deepest directory holding every weight file); every file below it goes into the volume")
	fl.BoolVar(&opts.JSON, "json", false, "print the report as JSON")
	cmdutil.SetSchema(cmd, "kiln.slim/v1")
	opts.SignFlag.Register(cmd)
	fl.BoolVar(&opts.SBOM, "sbom", false, "attach a CycloneDX SBOM (dpkg, Python, CUDA, what slim removed) as an attestation manifest in an image index (registry or oci: destinations)")
	fl.IntVarP(&opts.Jobs, "jobs", "j", 0, "layers processed at once (default: CPUs, at most 4)")
	fl.BoolVar(&opts.NoVerify, "no-verify", false, "skip hashing local blobs (registry blobs are always verified)")
	cmdutil.ProgressFlag(fl, &opts.Progress)
	fl.StringVar(&opts.WorkDir, "work-dir", "", "scratch directory for the new blobs (default: a temporary directory, removed afterwards)")
	fl.StringSliceVar(&opts.GPUs, "gpus", nil, "prune GPU code to what these GPUs run (names such as h100,l4 or sm_90)")
	fl.BoolVar(&opts.KeepPTX, "keep-ptx", true, "with --gpus: keep each fat binary's newest PTX, so GPUs newer than the fleet start through JIT")
	fl.BoolVar(&opts.PruneNVIDIA, "prune-nvidia-libs", false, "with --gpus: prune NVIDIA's redistributable libraries too (check that their license allows modified copies)")
	return cmd
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func loadSlimPolicy(s string) (*slim.Policy, error) {
	// A directory of that name (the repository's weights/ package, say)
	// is not a policy file: the built-in is meant.
	if fi, err := os.Stat(s); err == nil && !fi.IsDir() {
		return slim.LoadPolicy(s)
	}
	p, err := slim.BuiltinPolicy(s)
	if err != nil {
		return nil, fmt.Errorf("%v (no such file either)", err)
	}
	return p, nil
}

// slimFlags is what kiln slim's flags say, checked before the image is
// opened: the encodings and where each goes, the policy and the fleet.
type slimFlags struct {
	comps []layers.Compression
	// to is --to, parsed here once; dests one per encoding (the first
	// --to, zstd beside it), and weightsTo --weights-to, derived from it
	// or parsed here: nothing after reads a reference string again.
	dests     []layers.Ref
	to        layers.Ref
	weightsTo layers.Ref
	esgz      bool
	// erofsTo is where --format erofs writes the EROFS variant (empty:
	// none), erofsComp the compression inside its layers.
	erofsTo   layers.Ref
	erofsComp erofs.Compression
	maxLayer  int64
	pol       *slim.Policy
	fleet     []fatbin.GPU
	key       *sign.Signer
	lopts     []registry.Option
}

// parseSlimFlags checks kiln slim's flags; every mistake is a usage error
// (exit 2) naming the flag.
func parseSlimFlags(opts *SlimOptions) (*slimFlags, error) {
	if err := cmdutil.CheckProgress(opts.Progress); err != nil {
		return nil, err
	}
	if opts.To == "" {
		return nil, cmdutil.UsageErr("--to is required (REGISTRY/REPO:TAG, oci:DIR[:TAG] or docker-archive:FILE)")
	}
	if opts.Level < 1 || opts.Level > 22 {
		return nil, cmdutil.UsageErr("--level %d: zstd levels are 1..22", opts.Level)
	}
	comps, err := verbkit.ParseCompression(opts.Compression)
	if err != nil {
		return nil, cmdutil.UsageErr("--compression: %v", err)
	}
	esgz, wantErofs := false, false
	if opts.StartupList != "" && opts.Probe == "" {
		return nil, cmdutil.UsageErr("--startup-list needs --probe: the list is what the probe opened")
	}
	erofsComp, err := erofs.ParseCompression(opts.Erofs)
	if err != nil {
		return nil, cmdutil.UsageErr("--erofs-compression: %v", err)
	}
	switch opts.Format {
	case "oci", "":
	case "erofs":
		wantErofs = true
	case "estargz":
		// The zstd blobs are the source the eStargz layers are re-laid
		// from, and the image the probe pulls (the faster to pull).
		esgz, comps = true, []layers.Compression{layers.Zstd}
	default:
		return nil, cmdutil.UsageErr("--format: %q is not one of oci, estargz, erofs", opts.Format)
	}
	maxLayer, err := bytesize.Parse(opts.MaxLayerSize)
	if err != nil {
		return nil, cmdutil.UsageErr("--max-layer-size: %v", err)
	}
	lopts, err := opts.LayersOptions()
	if err != nil {
		return nil, err
	}
	to, err := layers.ParseRef(opts.To, lopts...)
	if err != nil {
		return nil, cmdutil.UsageErr("--to: %v", err)
	}
	if opts.SBOM && to.Kind == layers.KindDockerArchive {
		return nil, cmdutil.UsageErr("--sbom: a docker archive holds no attestation; write to a registry or oci:DIR")
	}
	if err := opts.SignFlag.CheckDest(to); err != nil {
		return nil, err
	}
	key, err := opts.SignFlag.LoadSigner()
	if err != nil {
		return nil, err
	}
	// Where each encoding goes: the first under --to, zstd (with both)
	// beside it. A docker archive stores plain tars whatever the blobs
	// are: one encoding is enough to write it.
	dests := []layers.Ref{to}
	if esgz && to.Kind == layers.KindDockerArchive {
		return nil, cmdutil.UsageErr("--format estargz: a docker archive stores plain tars; write to a registry or an OCI layout")
	}
	if wantErofs && to.Kind == layers.KindDockerArchive {
		return nil, cmdutil.UsageErr("--format erofs: a docker archive stores plain tars for docker load; write to a registry or an OCI layout")
	}
	if to.Kind == layers.KindDockerArchive {
		// zstd when it is among them: the cheaper to write.
		comps = comps[len(comps)-1:]
	} else if len(comps) > 1 && !esgz {
		// Two encodings in an untagged oci:DIR: tagged latest and
		// latest-zstd, never two untagged manifests (issue 27).
		dests[0] = to.WithLayoutTag(verbkit.DefaultLayoutTag)
		zd, err := layers.ZstdDest(dests[0])
		if err != nil {
			return nil, cmdutil.UsageErr("--compression both: %v", err)
		}
		dests = append(dests, zd)
	}
	var erofsTo layers.Ref
	if wantErofs {
		// Beside the others: an untagged oci:DIR gets latest-erofs too.
		dests[0] = to.WithLayoutTag(verbkit.DefaultLayoutTag)
		if erofsTo, err = layers.ErofsDest(dests[0]); err != nil {
			return nil, cmdutil.UsageErr("--format erofs: %v", err)
		}
	}
	pol, err := loadSlimPolicy(opts.Policy)
	if err != nil {
		return nil, cmdutil.UsageErr("--policy: %v", err)
	}
	if opts.PruneLibs {
		pol.PruneLibs = slim.PruneUnreferenced
	}
	var weightsTo layers.Ref
	if opts.WeightsTo != "" {
		if weightsTo, err = layers.ParseRef(opts.WeightsTo, lopts...); err != nil {
			return nil, cmdutil.UsageErr("--weights-to: %v", err)
		}
		if pol.Weights != slim.WeightsDivert {
			return nil, cmdutil.UsageErr("--weights-to: policy %s says weights: %s; use a policy with weights: divert", pol.Name, pol.Weights)
		}
	}
	fleet, err := slim.ParseFleet(opts.GPUs)
	if err != nil {
		return nil, cmdutil.UsageErr("--gpus: %v", err)
	}
	if len(fleet) == 0 && opts.PruneNVIDIA {
		return nil, cmdutil.UsageErr("--prune-nvidia-libs needs --gpus")
	}
	return &slimFlags{comps: comps, dests: dests, to: to, weightsTo: weightsTo, esgz: esgz, erofsTo: erofsTo, erofsComp: erofsComp, maxLayer: maxLayer, pol: pol, fleet: fleet, key: key, lopts: lopts}, nil
}

func runSlim(ctx context.Context, opts *SlimOptions) (err error) {
	fl, err := parseSlimFlags(opts)
	if err != nil {
		return err
	}
	comps, maxLayer, pol, fleet, lopts := fl.comps, fl.maxLayer, fl.pol, fl.fleet, fl.lopts
	img, err := verbkit.OpenImage(ctx, opts.Image, lopts...)
	if err != nil {
		return err
	}
	defer img.Close()
	if n, ok := layers.SourceName(img); ok {
		// A docker archive records the source's name, as docker save would.
		fl.lopts = append(fl.lopts, layers.WithArchiveName(n))
	}

	work := opts.WorkDir
	if work == "" {
		// Named after this process: a later run sweeps it if this one is
		// killed before its defer runs.
		if work, err = scratch.Dir(envOr("KILN_WORK_DIR", ""), "kiln-slim"); err != nil {
			return err
		}
		defer os.RemoveAll(work)
	} else {
		// A failed (or interrupted) run keeps nothing it wrote in the
		// user's --work-dir: the rewrite's blobs are as large as the image.
		defer func() {
			if err != nil {
				for _, d := range []string{"image", "weights", "probe"} {
					_ = os.RemoveAll(filepath.Join(work, d))
				}
			}
		}()
	}
	bk, err := slimPreflight(ctx, opts, fl, img, work)
	if err != nil {
		return err
	}
	if bk != nil {
		defer bk.Close()
	}
	ro := slim.Options{Policy: pol, WorkDir: filepath.Join(work, "image"), Level: opts.Level, Compression: comps, MaxLayerSize: maxLayer,
		Force: opts.Force, Concurrency: opts.Jobs, SkipVerify: opts.NoVerify,
		GPUs: fleet, DropPTX: !opts.KeepPTX, PruneNVIDIA: opts.PruneNVIDIA}
	var col *weights.Collector
	if opts.WeightsTo != "" {
		if col, err = weights.NewCollector(filepath.Join(work, "weights"), weights.WithMount(opts.WeightsMount)); err != nil {
			return err
		}
		ro.Divert = col
	}
	// One bar per pass, each to the image's compressed size: both read
	// every layer.
	bars := cmdutil.NewProgress(opts.IO.ErrOut, opts.Progress)
	ro.ScanProgress = bars.Counter("scan "+img.Ref.Raw, img.CompressedSize())
	ro.Progress = bars.Counter("rewrite "+img.Ref.Raw, img.CompressedSize())
	res, err := slim.Rewrite(ctx, img, ro)
	bars.Stop()
	if err != nil {
		var je *slim.JITError
		if errors.As(err, &je) {
			return cmdutil.Exit(cmdutil.ExitFailure, err)
		}
		return err
	}
	rep := res.Report
	if pol.Prunes() && opts.Probe == "" {
		rep.Warnings = append(rep.Warnings, "prune_libs without --probe: nothing checked that the application still loads what it dlopens; run kiln slim --probe 'CMD' with a command that exercises it")
	}

	labels := map[string]string{}
	var weights layers.Ref // the weights artifact, by digest, when one was written
	if col != nil && rep.DivertedFiles > 0 {
		st, err := strip.Finish(ctx, col, fl.weightsTo, opts.WeightsMount, img.Digest.String(), lopts...)
		if err != nil {
			return fmt.Errorf("--weights-to: %w", err)
		}
		maps.Copy(labels, st.Labels)
		weights = st.Ref
		termtable.Fprintw(opts.IO.ErrOut, cmdutil.TermWidth(opts.IO.ErrOut), "weights: ", "  ", fmt.Sprintf("%d files → %s (mount %s)", rep.DivertedFiles, st.Ref, st.Manifest.Mount))
	}
	signer := opts.SignFlag.Signer(fl.key, fl.lopts)
	_, err = slim.Publish(ctx, res, slim.PublishOptions{Compressions: comps, Dests: fl.dests, Archive: fl.to.Kind == layers.KindDockerArchive,
		Labels: labels, EStargz: fl.esgz, StartupList: opts.StartupList,
		Probe: slim.ProbeOptions{Cmd: opts.Probe, Client: bk, Registry: opts.ProbeRegistry, WorkDir: work, Tools: probeTools},
		Erofs: slim.ErofsOptions{Dest: fl.erofsTo, Compression: fl.erofsComp, Jobs: opts.Jobs, WorkDir: work},
		SBOM:  opts.SBOM, Version: opts.Version, Signer: signer, Layers: fl.lopts, Log: opts.IO.ErrOut})
	var pe *slim.ProbeError
	if errors.As(err, &pe) {
		return cmdutil.Exit(cmdutil.ExitFailure, err)
	}
	if err != nil {
		return err
	}
	if weights.Kind != "" {
		if s, err := signer.SignRef(ctx, weights); err != nil {
			return err
		} else if s != nil {
			termtable.Fprintw(opts.IO.ErrOut, cmdutil.TermWidth(opts.IO.ErrOut), "weights: ", "  ", fmt.Sprintf("signed %s with key %s", s.Ref, s.KeyID))
		}
	}
	return writeSlimReport(opts, rep)
}

// slimPreflight checks, before the rewrite, what slim needs at its end:
// the destinations can be written, BuildKit answers (--probe; its client
// is returned for the probe) and the work directory's file system holds
// the new layers: an estimate of one copy of the image's compressed layers
// per encoding, and one more for the probe's layout.
func slimPreflight(ctx context.Context, opts *SlimOptions, fl *slimFlags, img *layers.Image, work string) (*client.Client, error) {
	if err := layers.CheckTarget(ctx, "--to", fl.to, fl.lopts...); err != nil {
		return nil, err
	}
	if fl.weightsTo.Kind != "" {
		if err := layers.CheckTarget(ctx, "--weights-to", fl.weightsTo, fl.lopts...); err != nil {
			return nil, err
		}
	}
	copies := int64(len(fl.comps))
	if fl.erofsTo.Kind != "" {
		if err := erofs.Check(ctx); err != nil {
			return nil, err
		}
		copies++
	}
	var bk *client.Client
	if opts.Probe != "" {
		if opts.ProbeRegistry != "" {
			pr, err := layers.ParseRef(slim.ProbeRef(opts.ProbeRegistry, "probe"), fl.lopts...)
			if err != nil {
				return nil, cmdutil.UsageErr("--probe-registry: %v", err)
			}
			if err := layers.CheckTarget(ctx, "--probe-registry", pr, fl.lopts...); err != nil {
				return nil, err
			}
		} else {
			copies++
		}
		// containerd's content store (the probe's layout) warns through
		// logrus (e.g. about fsverity); kiln's own messages are enough.
		logrus.SetLevel(logrus.ErrorLevel)
		var err error
		if bk, _, err = opts.BuildKit(ctx, opts.Builder, opts.TLS()); err != nil {
			return nil, fmt.Errorf("--probe needs BuildKit: %w", err)
		}
	}
	needs := []preflight.Need{{Dir: work, Bytes: copies * img.CompressedSize(), What: "the slimmed layers (--work-dir)"}}
	if fl.to.Kind == layers.KindOCILayout || fl.to.Kind == layers.KindDockerArchive {
		// The slim image is written there too, once per encoding: at most
		// the image's own size each (slim only removes).
		dir := fl.to.Path
		if fl.to.Kind == layers.KindDockerArchive {
			dir = filepath.Dir(dir)
		}
		needs = append(needs, preflight.Need{Dir: dir, Bytes: int64(len(fl.comps)) * img.CompressedSize(), What: "the image written to --to " + fl.to.Raw})
	}
	if err := preflight.Disks(needs...); err != nil {
		if bk != nil {
			bk.Close()
		}
		return nil, err
	}
	return bk, nil
}

// writeSlimReport prints the report: one JSON object with --json, else
// the table and a line per image written.
func writeSlimReport(opts *SlimOptions, rep *slim.Report) error {
	if opts.JSON {
		return cmdutil.WriteJSON(opts.IO.Out, rep)
	}
	if err := rep.WriteTable(opts.IO.Out, cmdutil.TableOptions(opts.IO.Out)...); err != nil {
		return err
	}
	fmt.Fprintln(opts.IO.Out)
	for _, p := range rep.Images {
		// The digest whole (to pin the image), on its own line: with the
		// reference it would run past 80 columns.
		fmt.Fprintf(opts.IO.Out, "wrote %s (%s)\n      %s\n", p.Ref, p.Compression, p.Digest)
		if p.SBOM != "" {
			fmt.Fprintf(opts.IO.Out, "sbom  %s: index %s, attestation %s (CycloneDX %s)\n", p.Ref, cmdutil.Short(p.Index), cmdutil.Short(p.SBOM), sbom.SpecVersion)
		}
		if p.Signed != nil {
			fmt.Fprintf(opts.IO.Out, "signed %s with key %s (%s)\n", cmdutil.Short(p.Signed.Digest), p.Signed.KeyID, p.Signed.Format)
		}
	}
	fmt.Fprintf(opts.IO.Out, "image ID %s\n", rep.ImageID)
	return nil
}

// probeTools is the kiln-tools directory the --format estargz probe
// records from: this kiln, mounted into the probe container.
func probeTools() (string, func(), error) {
	exe, err := os.Executable()
	if err != nil {
		return "", nil, err
	}
	return builder.ToolsDir(exe)
}
