package weightscmd

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/kiln-build/kiln/cmd/kiln/internal/cmdutil"
	"github.com/kiln-build/kiln/cmd/kiln/internal/verbkit"
	"github.com/kiln-build/kiln/internal/atomicfile"
	"github.com/kiln-build/kiln/internal/bytesize"
	"github.com/kiln-build/kiln/internal/preflight"
	"github.com/kiln-build/kiln/internal/scratch"
	"github.com/kiln-build/kiln/internal/termtable"
	"github.com/kiln-build/kiln/layers"
	"github.com/kiln-build/kiln/registry"
	"github.com/kiln-build/kiln/sign"
	"github.com/kiln-build/kiln/slim"
	"github.com/kiln-build/kiln/weights"
	"github.com/kiln-build/kiln/weights/strip"
)

func NewCmdWeights(f *verbkit.Factory) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "weights",
		Short: "Move model weights out of images into volumes pulled once and mounted",
		Long: `Weights leave the image as an OCI artifact (CNCF ModelPack media types: one
uncompressed layer per large file, whose digest is the file's sha256) plus a
volume manifest (docs/weights.md). A host pulls the volume once, verified and
resumable, and every container mounts it read-only where the image expects it.`,
	}
	cmd.AddCommand(NewCmdWeightsStrip(f, nil), NewCmdWeightsPull(f, nil), NewCmdWeightsVerify(f, nil), NewCmdWeightsRunArgs(f, nil))
	return cmd
}

// WeightsStripOptions are kiln weights strip's inputs.
type WeightsStripOptions struct {
	// Version is kiln\'s, recorded in what the command attaches (SBOM, provenance).
	Version     string
	IO          *cmdutil.IO
	Image       string
	To          string
	WeightsTo   string
	Mount       string
	ManifestOut string
	WorkDir     string
	Level       int
	Jobs        int
	JSON        bool
	Progress    string
	// SBOM is --sbom: a CycloneDX BOM of the weight files (SHA-256 each)
	// as a referrer of the weights artifact.
	SBOM bool
	// ImageTwin is --image-twin REF: also publish the volume as an image
	// (one uncompressed single-file layer per weight file) that a runtime
	// can mount as an image volume; the stripped image names it.
	ImageTwin string
	verbkit.SignFlag
	verbkit.ImageFlags
}

// NewCmdWeightsStrip is kiln weights strip IMAGE.
// runF, when not nil, gets the parsed options instead of the
// command running (tests stop there).
func NewCmdWeightsStrip(f *verbkit.Factory, runF func(*WeightsStripOptions) error) *cobra.Command {
	ios := f.IO
	opts := &WeightsStripOptions{IO: ios, ImageFlags: f.ImageFlags(), Version: f.Version}
	cmd := &cobra.Command{
		Use:   "strip IMAGE --to REF --weights-to REF|oci:DIR",
		Short: "Take the weight files out of an image into a weights artifact",
		Long: `Rewrites IMAGE without its model weights (files detected by content:
safetensors, GGUF, pickled torch, ONNX, ...) and publishes them as a weights
artifact. The new image keeps its config and gains labels:
  dev.kiln.weights.manifest   the artifact, by digest
  dev.kiln.weights.mount      where the volume must be mounted
Everything else stays; use 'kiln slim' to drop toolkit files as well.`,
		Example: `  kiln weights strip 127.0.0.1:5000/acme/serve:1.2 --to 127.0.0.1:5000/acme/serve:1.2-slim \
      --weights-to 127.0.0.1:5000/acme/serve-weights:1.2
  kiln weights strip docker-archive:app.tar --to oci:./out:app --weights-to oci:./weights:app`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Image = args[0]
			return cmdutil.Run(cmd.Context(), opts, runF, runWeightsStrip)
		},
	}
	opts.ImageFlags.Register(cmd)
	cmd.Flags().StringVar(&opts.To, "to", "", "where the image without weights goes (REF, oci:DIR[:TAG], docker-archive:FILE)")
	cmd.Flags().StringVar(&opts.WeightsTo, "weights-to", "", "where the weights artifact goes (REF or oci:DIR[:TAG])")
	cmd.Flags().StringVar(&opts.Mount, "mount", "", "mount path of the volume (default: the deepest directory holding every weight file); every file below it goes into the volume")
	cmd.Flags().StringVar(&opts.ManifestOut, "manifest-out", "", "also write the volume manifest to this file")
	cmd.Flags().StringVar(&opts.ImageTwin, "image-twin", "", "also publish the volume as an image here (REF or oci:DIR[:TAG]), for Kubernetes image volumes (docs/weights.md)")
	cmd.Flags().StringVar(&opts.WorkDir, "work-dir", "", "scratch directory for blobs (default: $TMPDIR); needs the image's size free")
	cmd.Flags().IntVar(&opts.Level, "level", slim.DefaultLevel, "zstd level of the rewritten layers (1..22)")
	cmd.Flags().IntVarP(&opts.Jobs, "jobs", "j", 0, "layers read at once (default: CPUs, at most 4)")
	cmd.Flags().BoolVar(&opts.JSON, "json", false, "print the result as JSON")
	cmdutil.SetSchema(cmd, "kiln.weights-strip/v2")
	cmdutil.ProgressFlag(cmd.Flags(), &opts.Progress)
	opts.SignFlag.Register(cmd)
	cmd.Flags().BoolVar(&opts.SBOM, "sbom", false, "attach a CycloneDX SBOM of the weight files (each with its SHA-256) to the weights artifact as a referrer (registry --weights-to)")
	return cmd
}

type stripResult struct {
	Image       string `json:"image"`
	ImageDigest string `json:"image_digest"`
	Weights     string `json:"weights"`
	Mount       string `json:"mount"`
	SetDigest   string `json:"set_digest"`
	Files       int    `json:"files"`
	Bytes       int64  `json:"bytes"`
	// Beside counts the files that are not weights but sat below the
	// mount: they go into the volume too, so that the mount hides none.
	Beside         int               `json:"beside"`
	Layers         int               `json:"layers"`
	BeforeSize     int64             `json:"before_compressed_size"`
	AfterSize      int64             `json:"after_compressed_size"`
	Labels         map[string]string `json:"labels"`
	VolumeManifest *weights.Manifest `json:"manifest"`
	// Signed are the --sign-key signatures: the image's, then the
	// weights artifact's (when it is in a registry).
	Signed []*sign.Signed `json:"signed,omitempty"`
	// SBOM is the digest of the SPDX attestation attached to the
	// weights artifact (registry only).
	SBOM string `json:"sbom,omitempty"`
	// Twin is the image-shaped twin (--image-twin), by digest.
	Twin string `json:"twin,omitempty"`
}

func runWeightsStrip(ctx context.Context, opts *WeightsStripOptions) error {
	if opts.To == "" || opts.WeightsTo == "" {
		return cmdutil.UsageErr("weights strip needs --to and --weights-to")
	}
	if err := cmdutil.CheckProgress(opts.Progress); err != nil {
		return err
	}
	lopts, err := opts.LayersOptions()
	if err != nil {
		return err
	}
	// The three destinations, parsed here once.
	to, err := layers.ParseRef(opts.To, lopts...)
	if err != nil {
		return cmdutil.UsageErr("--to: %v", err)
	}
	weightsTo, err := layers.ParseRef(opts.WeightsTo, lopts...)
	if err != nil || weightsTo.Kind == layers.KindDockerArchive {
		return cmdutil.UsageErr("--weights-to %q: want a registry reference or oci:DIR[:TAG]", opts.WeightsTo)
	}
	var twin layers.Ref
	if opts.ImageTwin != "" {
		if twin, err = layers.ParseRef(opts.ImageTwin, lopts...); err != nil || twin.Kind == layers.KindDockerArchive {
			return cmdutil.UsageErr("--image-twin %q: want a registry reference or oci:DIR[:TAG]", opts.ImageTwin)
		}
	}
	if err := opts.SignFlag.CheckDest(to); err != nil {
		return err
	}
	key, err := opts.SignFlag.LoadSigner()
	if err != nil {
		return err
	}
	pol, err := slim.BuiltinPolicy("weights")
	if err != nil {
		return err
	}
	img, err := verbkit.OpenImage(ctx, opts.Image, lopts...)
	if err != nil {
		return err
	}
	defer img.Close()
	work, err := scratch.Dir(opts.WorkDir, "kiln-weights")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	// What the end needs, checked before the rewrite: the destinations
	// can be written, and the work directory holds the weights and the
	// new layers (together about the image's compressed size).
	for _, d := range []struct {
		flag string
		ref  layers.Ref
	}{{"--to", to}, {"--weights-to", weightsTo}, {"--image-twin", twin}} {
		if d.ref.Kind == "" {
			continue
		}
		if err := layers.CheckTarget(ctx, d.flag, d.ref, lopts...); err != nil {
			return err
		}
	}
	if err := preflight.Disk(work, img.CompressedSize(), "the weights and the new layers"); err != nil {
		return fmt.Errorf("--work-dir: %w", err)
	}
	col, err := weights.NewCollector(filepath.Join(work, "weights"), weights.WithMount(opts.Mount))
	if err != nil {
		return err
	}
	bars := cmdutil.NewProgress(opts.IO.ErrOut, opts.Progress)
	res, err := slim.Rewrite(ctx, img, slim.Options{Policy: pol, Divert: col, WorkDir: filepath.Join(work, "slim"), Level: opts.Level, Concurrency: opts.Jobs,
		ScanProgress: bars.Counter("scan "+opts.Image, img.CompressedSize()), Progress: bars.Counter("strip "+opts.Image, img.CompressedSize())})
	bars.Stop()
	if err != nil {
		return err
	}
	if len(col.Files()) == 0 {
		return fmt.Errorf("%s: no model weights found (nothing to strip)", opts.Image)
	}
	st, err := strip.Run(ctx, col, res, strip.Options{To: to, WeightsTo: weightsTo, Mount: opts.Mount, ImageTwin: twin,
		Source: img, SBOM: opts.SBOM, Version: opts.Version, Signer: opts.SignFlag.Signer(key, lopts), Layers: lopts})
	if err != nil {
		return err
	}
	m := st.Manifest
	if opts.ManifestOut != "" {
		b, _ := m.Encode()
		if err := atomicfile.WriteFile(opts.ManifestOut, b, 0o644); err != nil {
			return fmt.Errorf("--manifest-out: %v", err)
		}
	}
	r := stripResult{Image: opts.To, ImageDigest: st.Image.Digest.String(), Weights: st.Ref.String(), Mount: m.Mount, SetDigest: m.SetDigest,
		Files: len(m.Files), Bytes: m.Size, Beside: res.Report.DivertedBeside, Layers: len(m.Layers), BeforeSize: img.CompressedSize(), AfterSize: res.Report.After.CompressedSize,
		Labels: st.Labels, VolumeManifest: m, Signed: st.Signed, SBOM: st.SBOM, Twin: st.Twin}
	if opts.JSON {
		return cmdutil.WriteJSON(opts.IO.Out, r)
	}
	tw := tabwriter.NewWriter(opts.IO.Out, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "image\t%s@%s\n", r.Image, r.ImageDigest)
	fmt.Fprintf(tw, "size\t%s → %s (compressed)\n", bytesize.Format(r.BeforeSize), bytesize.Format(r.AfterSize))
	fmt.Fprintf(tw, "weights\t%s\n", r.Weights)
	fmt.Fprintf(tw, "files\t%d files, %s in %d layers\n", r.Files, bytesize.Format(r.Bytes), r.Layers)
	fmt.Fprintf(tw, "mount\t%s\n", r.Mount)
	if r.Beside > 0 {
		fmt.Fprintf(tw, "\t%d of the files are not weights: the volume holds\n\tall of %s, which the mount would hide\n", r.Beside, r.Mount)
	}
	fmt.Fprintf(tw, "set digest\t%s\n", r.SetDigest)
	if r.Twin != "" {
		fmt.Fprintf(tw, "image twin\t%s\n", r.Twin)
	}
	for _, s := range r.Signed {
		fmt.Fprintf(tw, "signed\t%s (key %s, %s)\n", s.Ref, s.KeyID, s.Format)
	}
	return tw.Flush()
}

// WeightsPullOptions are kiln weights pull's inputs.
type WeightsPullOptions struct {
	IO       *cmdutil.IO
	Ref      string
	Into     string
	From     string
	Jobs     int
	JSON     bool
	Progress string
	// Concurrency bounds HTTP requests in flight; ChunkSize and LimitRate
	// are byte sizes as typed ("16MiB", "100M", "0").
	Concurrency int
	ChunkSize   string
	LimitRate   string
	// Quick trusts the ready marker and the files' sizes and times
	// without hashing them.
	Quick bool
	verbkit.ImageFlags
}

// NewCmdWeightsPull is kiln weights pull REF.
// runF, when not nil, gets the parsed options instead of the
// command running (tests stop there).
func NewCmdWeightsPull(f *verbkit.Factory, runF func(*WeightsPullOptions) error) *cobra.Command {
	ios := f.IO
	opts := &WeightsPullOptions{IO: ios, ImageFlags: f.ImageFlags()}
	cmd := &cobra.Command{
		Use:   "pull REF|IMAGE|MANIFEST.json --into DIR",
		Short: "Fill a volume directory from a weights artifact, verified and resumable",
		Long: `Downloads every file of the volume into DIR/model, the directory the
application mounts (read-only); kiln's bookkeeping stays beside it in DIR.
Blobs in parallel, a large blob as parallel HTTP Range chunks (--chunk-size,
at most --requests requests in flight), staged in DIR/.kiln-partial and
resumed after an interruption (only the missing bytes), each file verified
(sha256) and flushed (fdatasync) before an atomic rename into place, and
DIR/.kiln-ready (the set digest) written last. A volume of kiln's old layout
(files at DIR's top level) is moved into DIR/model first, by renames, then
verified.
A volume whose marker already matches is hashed (-j files at once) before it
is called ready, so bit rot that kept a file's size and times is found; a
damaged volume is healed. --quick trusts the marker and the files' sizes,
modes and times instead (no read of the weights, no bit rot found). A second pull into the same DIR waits for the first (DIR/.kiln-lock).
Paths are checked component by component: nothing is written outside DIR and
no symlink is followed. REF may also be an image made by 'kiln weights strip'
(its dev.kiln.weights.manifest label is followed).`,
		Example: `  kiln weights pull 127.0.0.1:5000/acme/serve-weights@sha256:9f2c... --into /var/lib/models/serve
  kiln weights pull 127.0.0.1:5000/acme/serve:1.2-slim --into /var/lib/models/serve
  kiln weights pull weights.json --from mirror.local:5000/acme/serve-weights --into /data/w`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Ref = args[0]
			return cmdutil.Run(cmd.Context(), opts, runF, runWeightsPull)
		},
	}
	opts.ImageFlags.Register(cmd)
	cmd.Flags().StringVar(&opts.Into, "into", "", "volume directory to fill (created if missing)")
	cmd.Flags().StringVar(&opts.From, "from", "", "fetch blobs from this repository (REGISTRY/REPO or oci:DIR) instead")
	cmd.Flags().IntVarP(&opts.Jobs, "jobs", "j", 4, "blobs downloaded at once")
	cmd.Flags().IntVar(&opts.Concurrency, "requests", weights.DefaultConcurrency, "HTTP requests in flight, all blobs together")
	cmdutil.Alias(cmd.Flags(), "concurrency", "requests")
	cmd.Flags().StringVar(&opts.ChunkSize, "chunk-size", "16MiB", "Range request size for large blobs (at least 4 chunks); 0: one connection per blob")
	cmd.Flags().StringVar(&opts.LimitRate, "limit-rate", "0", "cap the total transfer rate, bytes per second (e.g. 100M, 1GiB); 0: no cap")
	cmd.Flags().BoolVar(&opts.Quick, "quick", false, "a volume whose marker matches is ready if its files have their sizes, modes and times (no hashing)")
	cmd.Flags().BoolVar(&opts.JSON, "json", false, "print the result as JSON")
	cmdutil.Resumes(cmdutil.SetSchema(cmd, "kiln.weights-pull/v2"))
	cmdutil.ProgressFlag(cmd.Flags(), &opts.Progress)
	return cmd
}

func runWeightsPull(ctx context.Context, opts *WeightsPullOptions) error {
	if opts.Into == "" {
		return cmdutil.UsageErr("weights pull needs --into DIR")
	}
	if err := cmdutil.CheckProgress(opts.Progress); err != nil {
		return err
	}
	if opts.Jobs < 1 {
		return cmdutil.UsageErr("--jobs: must be at least 1")
	}
	if opts.Concurrency < 1 {
		return cmdutil.UsageErr("--requests: must be at least 1")
	}
	chunk, err := bytesize.Parse(opts.ChunkSize)
	if err != nil {
		return cmdutil.UsageErr("--chunk-size: %v", err)
	}
	if chunk == 0 {
		chunk = -1 // PullOptions: negative means never split
	} else if chunk < 1<<20 {
		return cmdutil.UsageErr("--chunk-size: %s is under 1MiB", opts.ChunkSize)
	}
	rate, err := bytesize.Parse(opts.LimitRate)
	if err != nil {
		return cmdutil.UsageErr("--limit-rate: %v", err)
	}
	lopts, err := opts.LayersOptions()
	if err != nil {
		return err
	}
	if err := checkWeightsArg(opts.Ref, lopts); err != nil {
		return err
	}
	res, err := weights.Resolve(ctx, opts.Ref, opts.From, lopts...)
	if err != nil {
		return err
	}
	var done atomic.Int64
	// A bar for the volume, and one per file (or packed group of small
	// files) while it is fetched.
	bar := cmdutil.NewProgress(opts.IO.ErrOut, opts.Progress)
	part := bar.Parts("pull "+res.Manifest.Mount, res.Manifest.Size, &done)
	// A blob carrying one file is named by it; a packed group of small
	// files by its digest.
	files := map[string][]string{}
	for _, f := range res.Manifest.Files {
		files[f.Layer] = append(files[f.Layer], f.Path)
	}
	names := map[string]string{}
	for _, l := range res.Manifest.Layers {
		names[l.Digest] = "  " + cmdutil.Short(l.Digest)
		if len(files[l.Digest]) == 1 {
			names[l.Digest] = "  " + files[l.Digest][0]
		}
	}
	r, err := weights.Pull(ctx, res.Manifest, res.Source, opts.Into, weights.PullOptions{
		Jobs: opts.Jobs, Progress: &done, Concurrency: opts.Concurrency, ChunkSize: chunk, LimitRate: rate, TrustMarker: opts.Quick,
		BlobProgress: func(d string, size int64) *atomic.Int64 { return part(names[d], size) },
		OnWait:       func() { fmt.Fprintf(bar.Writer(), "waiting for another kiln weights pull into %s\n", opts.Into) }})
	bar.Stop()
	if err != nil {
		return err
	}
	if opts.JSON {
		return cmdutil.WriteJSON(opts.IO.Out, struct {
			*weights.PullResult
			Dir   string `json:"dir"`
			Mount string `json:"mount"`
			Ref   string `json:"ref,omitempty"`
		}{r, opts.Into, res.Manifest.Mount, res.Ref})
	}
	state := "pulled"
	switch {
	case r.AlreadyReady && r.Verified:
		state = "already ready (verified)"
	case r.AlreadyReady:
		state = "already ready (--quick: not verified)"
	case r.Migrated:
		state = "pulled; the files were moved from kiln's old layout (at the volume's top level) into " + weights.ModelDir + "/: mount that directory"
	}
	termtable.Labeled(opts.IO.Out, cmdutil.TermWidth(opts.IO.Out), 12, fmt.Sprintf(
		"volume      %s\nstate       %s\nfiles       %d files, %s (fetched %s, resumed %s, %d already present)\nset digest  %s\nmount       %s at %s, read-only\n",
		opts.Into, state, r.Files, bytesize.Format(r.Bytes), bytesize.Format(r.Fetched), bytesize.Format(r.Resumed), r.Present, r.SetDigest, filepath.Join(opts.Into, weights.ModelDir), res.Manifest.Mount))
	return nil
}

// WeightsVerifyOptions are kiln weights verify's inputs.
type WeightsVerifyOptions struct {
	IO       *cmdutil.IO
	Dir      string
	Manifest string
	Jobs     int
	JSON     bool
	verbkit.ImageFlags
}

// NewCmdWeightsVerify is kiln weights verify.
// runF, when not nil, gets the parsed options instead of the
// command running (tests stop there).
func NewCmdWeightsVerify(f *verbkit.Factory, runF func(*WeightsVerifyOptions) error) *cobra.Command {
	ios := f.IO
	opts := &WeightsVerifyOptions{IO: ios, ImageFlags: f.ImageFlags()}
	cmd := &cobra.Command{
		Use:   "verify DIR",
		Short: "Check a weights volume offline (exit 1 when it does not verify)",
		Long: `Hashes every file of the volume (in DIR/model) and checks it against the
manifest pull kept in DIR/.kiln-manifest.json (or --manifest): sizes, sha256,
modes, no missing and no extra files, no symlinks, and the .kiln-ready marker
holding the set digest. A volume of kiln's old layout (files at DIR's top
level) does not verify: 'kiln weights pull' into DIR moves its files into
DIR/model. Exit 1 when anything differs.`,
		Example: `  kiln weights verify /var/lib/models/serve
  kiln weights verify /data/w --manifest weights.json --json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Dir = args[0]
			return cmdutil.Run(cmd.Context(), opts, runF, runWeightsVerify)
		},
	}
	opts.ImageFlags.Register(cmd)
	cmd.Flags().StringVar(&opts.Manifest, "manifest", "", "volume manifest (file, artifact or image) instead of DIR/.kiln-manifest.json")
	cmd.Flags().IntVarP(&opts.Jobs, "jobs", "j", 4, "files hashed at once")
	cmd.Flags().BoolVar(&opts.JSON, "json", false, "print the report as JSON")
	cmdutil.SetSchema(cmd, "kiln.weights-verify/v2")
	return cmd
}

func runWeightsVerify(ctx context.Context, opts *WeightsVerifyOptions) error {
	if fi, err := os.Stat(opts.Dir); err != nil || !fi.IsDir() {
		return fmt.Errorf("%s: not a directory", opts.Dir)
	}
	var m *weights.Manifest
	if opts.Manifest != "" {
		lopts, err := opts.LayersOptions()
		if err != nil {
			return err
		}
		res, err := weights.Resolve(ctx, opts.Manifest, "", lopts...)
		if err != nil {
			return err
		}
		m = res.Manifest
	}
	rep, err := weights.Verify(ctx, opts.Dir, m, opts.Jobs)
	if err != nil {
		return err
	}
	if opts.JSON {
		if err := cmdutil.WriteJSON(opts.IO.Out, rep); err != nil {
			return err
		}
	} else if rep.OK {
		termtable.Labeled(opts.IO.Out, cmdutil.TermWidth(opts.IO.Out), 12, fmt.Sprintf(
			"volume      %s\nstate       ok\nfiles       %d files, %s\nset digest  %s\n", opts.Dir, rep.Files, bytesize.Format(rep.Bytes), rep.SetDigest))
	} else {
		// The problems wrap within the terminal (an old layout's says what
		// to run at length).
		tb := termtable.New(termtable.Resolve(termtable.Width(cmdutil.TermWidth(opts.IO.Out))),
			termtable.Column{Head: "PATH", Shrink: true, Min: 24}, termtable.Column{Head: "PROBLEM", Wrap: true, Min: 30})
		for _, p := range rep.Problems {
			tb.Row(p.Path, p.Problem)
		}
		if err := tb.Write(opts.IO.Out); err != nil {
			return err
		}
		cmdutil.Notef(opts.IO.ErrOut, "%s does not verify: %d problems", opts.Dir, len(rep.Problems))
	}
	if !rep.OK {
		return cmdutil.SilentExit(cmdutil.ExitFailure)
	}
	return nil
}

// WeightsRunArgsOptions are kiln weights run-args' inputs.
type WeightsRunArgsOptions struct {
	IO        *cmdutil.IO
	Ref       string
	Volume    string
	Image     string
	InitImage string
	PullRef   string
	// Twin is --twin: the volume's image-shaped twin (weights strip
	// --image-twin), for the Kubernetes image-volume form.
	Twin   string
	Format string
	JSON   bool
	verbkit.ImageFlags
}

// NewCmdWeightsRunArgs is kiln weights run-args.
// runF, when not nil, gets the parsed options instead of the
// command running (tests stop there).
func NewCmdWeightsRunArgs(f *verbkit.Factory, runF func(*WeightsRunArgsOptions) error) *cobra.Command {
	ios := f.IO
	opts := &WeightsRunArgsOptions{IO: ios, ImageFlags: f.ImageFlags()}
	cmd := &cobra.Command{
		Use:   "run-args REF|IMAGE|MANIFEST.json --volume NAME|DIR",
		Short: "Print docker run, Compose and Kubernetes snippets that mount a weights volume",
		Long: `Prints how to mount the volume's model directory (DIR/model: the model files,
without kiln's bookkeeping beside them) read-only where the image expects it:
'docker run' (a bind of DIR/model, or --mount volume-subpath=model for a named
volume, Docker 26+), a Compose service (a bind, or volume.subpath), and a
Kubernetes pod spec (a PVC, or a hostPath for a DIR, filled by an init
container running 'kiln weights pull' over the whole volume; the app mounts
subPath: model). With --twin, the image-volume form mounts the twin's model
directory (subPath on an image volume: Kubernetes 1.33+). NAME is a docker
volume or PVC claim; a DIR is an absolute or ./ path.`,
		Example: `  kiln weights run-args 127.0.0.1:5000/acme/serve:1.2-slim --volume serve-weights
  kiln weights run-args weights.json --volume /var/lib/models/serve --format docker`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Ref = args[0]
			return cmdutil.Run(cmd.Context(), opts, runF, runWeightsRunArgs)
		},
	}
	opts.ImageFlags.Register(cmd)
	cmd.Flags().StringVar(&opts.Volume, "volume", "", "docker volume / PVC claim name, or a host directory")
	cmd.Flags().StringVar(&opts.Image, "image", "", "application image (default: REF when it is an image, else IMAGE)")
	cmd.Flags().StringVar(&opts.InitImage, "init-image", "ghcr.io/kiln-build/kiln:"+f.VersionTag(), "kiln's own image, for the init container; pin it by digest (REPO@sha256:...; crane digest REPO:TAG prints it)")
	cmd.Flags().StringVar(&opts.PullRef, "pull-ref", "", "what the init container pulls (default: the artifact by digest)")
	cmd.Flags().StringVar(&opts.Twin, "twin", "", "the volume's image-shaped twin (kiln weights strip --image-twin): also print the Kubernetes image-volume form")
	cmd.Flags().StringVar(&opts.Format, "format", "all", "which snippets: all, docker, compose, kubernetes (k8s)")
	cmd.Flags().BoolVar(&opts.JSON, "json", false, "print the snippets as JSON")
	cmdutil.SetSchema(cmd, "kiln.weights-run-args/v2")
	return cmd
}

func runWeightsRunArgs(ctx context.Context, opts *WeightsRunArgsOptions) error {
	if opts.Volume == "" {
		return cmdutil.UsageErr("run-args needs --volume NAME|DIR")
	}
	switch opts.Format {
	case "k8s":
		opts.Format = "kubernetes" // kiln warm --emit's word
	case "all", "docker", "compose", "kubernetes":
	default:
		return cmdutil.UsageErr("--format: %q is not one of all, docker, compose, kubernetes (or k8s)", opts.Format)
	}
	lopts, err := opts.LayersOptions()
	if err != nil {
		return err
	}
	if err := checkWeightsArg(opts.Ref, lopts); err != nil {
		return err
	}
	res, err := weights.Resolve(ctx, opts.Ref, "", lopts...)
	if err != nil {
		return err
	}
	in := weights.RunArgsInput{Mount: res.Manifest.Mount, SetDigest: res.Manifest.SetDigest, Volume: opts.Volume,
		Image: opts.Image, InitImage: opts.InitImage, PullRef: opts.PullRef, Twin: opts.Twin}
	if in.Image == "" {
		in.Image = res.Image
	}
	// docker run, compose and a pod name images a registry serves: an OCI
	// layout or an archive would paste into a command that cannot run it.
	// An image in the Docker daemon is named as docker names it.
	r, rerr := layers.ParseRef(in.Image, lopts...)
	if n, ok := r.DockerName(); rerr == nil && ok {
		in.Image = n
	}
	if rerr == nil && (r.Kind == layers.KindOCILayout || r.Kind == layers.KindDockerArchive) {
		how := "push it to a registry (kiln slim --to REGISTRY/REPO:TAG, or crane push) and pass --image REGISTRY/REPO:TAG"
		if r.Kind == layers.KindDockerArchive {
			how = fmt.Sprintf("docker load -i %s and pass --image NAME:TAG (the name it loads as), or %s", r.Path, how)
		}
		return cmdutil.UsageErr("run-args: the image %s is a file on this machine, which docker run, compose and Kubernetes cannot run: %s", in.Image, how)
	}
	if in.PullRef == "" {
		in.PullRef = res.Ref
	}
	if in.PullRef == "" {
		cmdutil.Notef(opts.IO.ErrOut, "%s is a manifest file: the init container pulls WEIGHTS_REF; pass --pull-ref REGISTRY/REPO@sha256:...", opts.Ref)
	}
	s, err := weights.RunArgs(in)
	if err != nil {
		return cmdutil.UsageErr("%v", err)
	}
	// The init image appears in the Kubernetes pod, and in the docker
	// snippet's one-off fill of a named volume.
	if opts.Format == "all" || opts.Format == "kubernetes" || (opts.Format == "docker" && !weights.IsHostDir(opts.Volume)) {
		for _, w := range s.Warnings {
			cmdutil.Warn(opts.IO, w)
		}
	}
	if opts.JSON {
		return cmdutil.WriteJSON(opts.IO.Out, s)
	}
	w := opts.IO.Out
	if opts.Format == "all" || opts.Format == "docker" {
		fmt.Fprintf(w, "# docker\n%s", s.Docker)
	}
	if opts.Format == "all" || opts.Format == "compose" {
		fmt.Fprintf(w, "\n# compose.yaml\n%s", s.Compose)
	}
	if opts.Format == "all" || opts.Format == "kubernetes" {
		fmt.Fprintf(w, "\n# kubernetes\n%s", s.Kubernetes)
		if s.KubernetesImageVolume != "" {
			fmt.Fprintf(w, "\n# kubernetes, image volume\n%s", s.KubernetesImageVolume)
		}
	}
	return nil
}

// checkWeightsArg refuses, as a usage error (exit 2, as every verb does), an
// argument that is neither a file (a weights manifest) nor a reference
// that parses.
func checkWeightsArg(arg string, lopts []registry.Option) error {
	if _, err := os.Stat(arg); err == nil {
		return nil
	}
	_, err := verbkit.CheckRef("", arg, lopts...)
	return err
}
