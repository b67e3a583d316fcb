package warmcmd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/spf13/cobra"

	"github.com/kiln-build/kiln/cmd/kiln/internal/cmdutil"
	"github.com/kiln-build/kiln/cmd/kiln/internal/verbkit"
	"github.com/kiln-build/kiln/internal/atomicfile"
	"github.com/kiln-build/kiln/internal/bytesize"
	"github.com/kiln-build/kiln/internal/localfile"
	"github.com/kiln-build/kiln/internal/termtable"
	"github.com/kiln-build/kiln/internal/termtext"
	"github.com/kiln-build/kiln/layers"
	"github.com/kiln-build/kiln/recipes"
	"github.com/kiln-build/kiln/registry"
	"github.com/kiln-build/kiln/sign"
	"github.com/kiln-build/kiln/warm"
	"github.com/kiln-build/kiln/warm/containerd"
	"github.com/kiln-build/kiln/warm/docker"
	"github.com/kiln-build/kiln/warm/targets"
	"github.com/kiln-build/kiln/weights"
)

// WarmOptions are kiln warm's inputs.
type WarmOptions struct {
	IO          *cmdutil.IO
	Args        []string
	Target      string
	Namespace   string
	Unpack      bool
	DryRun      bool
	Concurrency int
	LimitRate   string
	ReadyFile   string
	JSON        bool
	Progress    string
	Compression string
	Snapshotter string
	ChunkSize   string
	// ErofsCache is --erofs-cache DIR (targets.Options).
	ErofsCache string
	// UnpackConcurrency is --unpack-concurrency (targets.Options).
	UnpackConcurrency int
	// WeightsInto is --weights-into DIR: the volume of each image's
	// dev.kiln.weights.manifest label (and of WEIGHTS arguments) is pulled
	// there and is part of the readiness gate.
	WeightsInto string
	// NoSpaceCheck skips the disk-space preflight (hidden; tests).
	NoSpaceCheck bool
	// Ingest and ContainerdRoot choose how bytes reach containerd
	// (targets.Options).
	Ingest         string
	ContainerdRoot string
	// VerifyKey is --verify-key PUBKEY|POLICY (warmverify.go).
	VerifyKey string
	// DockerStage and KeepStage: where the docker target stages layers
	// before docker load, and whether they stay after it.
	DockerStage string
	KeepStage   bool
	// Fleet are --hosts and --emit and their flags (warmfleet.go): set,
	// they run the warm on other hosts or print Kubernetes objects.
	Fleet fleetFlags
	verbkit.ImageFlags
	// OpenTarget opens --target (Factory.Open).
	OpenTarget func(ctx context.Context, spec warm.TargetSpec, o targets.Options) (warm.Target, error)
}

func hostPlatform() string {
	p := "linux/" + runtime.GOARCH
	if runtime.GOARCH == "arm" {
		p += "/v7"
	}
	return p
}

// NewCmdWarm is kiln warm IMAGE... (and, with --hosts, the fleet).
// runF, when not nil, gets the parsed options instead of the
// command running (tests stop there).
func NewCmdWarm(f *verbkit.Factory, runF func(*WarmOptions) error) *cobra.Command {
	ios := f.IO
	opts := &WarmOptions{IO: ios, ImageFlags: f.ImageFlags(), OpenTarget: f.Open}
	cmd := &cobra.Command{
		Use:   "warm IMAGE|LOCK|WEIGHTS... --target TARGET",
		Short: "Pre-warm a host's image store so containers start with no pull",
		Long: `Computes the warm set of each image (its index, the manifest, config and
layers for the host's platform), asks the target what it already holds and
fetches only what is missing from the registry: blobs in parallel, large
blobs as parallel HTTP Range chunks, each written through a resumable ingest
(a killed run resumes from the bytes already written) and verified against
its digest before it is committed. Then the image is recorded (containerd:
an image record with GC labels; oci: an index.json entry; docker: docker
load), and with --unpack unpacked into containerd's snapshotter.

Targets:
  containerd[:SOCKET]  containerd's content store (default socket
                       /run/containerd/containerd.sock); --namespace k8s.io
                       for Kubernetes nodes (default: "default", what ctr uses)
  oci:DIR              an OCI image layout cache (ctr images import, mirrors)
  docker[:SOCKET]      a Docker engine, via docker load; layers are staged
                       (resumable) in --docker-stage first

Arguments are registry references, kiln lock files (kiln.lock: the
runtime base image, pinned by its platform's manifest digest), or weights
(a weights artifact reference or a volume MANIFEST.json, with
--weights-into). With --weights-into DIR the volume an image's
dev.kiln.weights.manifest label names is pulled into DIR too (resumable,
verified, the files in DIR/model, .kiln-ready last; a volume of kiln's old
layout is moved into DIR/model) and is part of the readiness gate.

--mirror REGISTRY=ENDPOINT reads REGISTRY's images from ENDPOINT but
records them under their real names.

With --compression auto (the default) kiln takes the zstd variant of
REPO:TAG, REPO:TAG-zstd (kiln convert --compression zstd makes it), or the
zstd manifest of an index, when the target can run zstd layers.

Exit codes: 0 ready (every digest of the warm set verified present; with
--dry-run: nothing missing), 1 failure, 2 usage, 5 --dry-run found
something missing, 4 --verify-key refused a signature. --json prints one object (schema kiln.warm/v1,
docs/warm.md); --ready-file writes a marker only when ready.

--verify-key PUBKEY|POLICY checks each image's (and weights artifact's)
cosign signature after its manifests are read and before any layer is
fetched; one that is missing, signed by another key or altered is refused
with exit code 4, naming the image and why. The report's "signatures" and
the ready marker's "verified" record the digest, key and format checked.`,
		Example: `  kiln warm 127.0.0.1:5000/acme/serve:1.2 --target containerd --namespace k8s.io --unpack
  kiln warm ghcr.io/acme/serve:1.2 --target oci:/var/cache/kiln/oci --json
  kiln warm kiln.lock --target containerd --dry-run
  kiln warm reg.local/acme/serve:slim --target containerd --weights-into /var/lib/kiln/weights
  kiln warm reg.local/acme/serve:1.2 --target containerd --mirror reg.local=127.0.0.1:5000
  kiln warm reg.local/acme/serve:1.2 --target docker --limit-rate 200MiB --ready-file /run/kiln/ready`,
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Args = args
			if runF != nil {
				return runF(opts)
			}
			if handled, err := runFleetIfAsked(cmd.Context(), cmd, opts); handled {
				return err
			}
			return runWarm(cmd.Context(), opts)
		},
	}
	opts.ImageFlags.Register(cmd)
	pf := cmd.Flags().Lookup("platform")
	pf.DefValue = hostPlatform()
	_ = pf.Value.Set(hostPlatform())
	pf.Usage = "platform to warm (default: this host's)"
	fl := cmd.Flags()
	fl.StringVar(&opts.Target, "target", "", "where to warm: containerd[:SOCKET], oci:DIR or docker[:SOCKET]")
	fl.StringVarP(&opts.Namespace, "namespace", "n", "default", "containerd namespace (Kubernetes: k8s.io)")
	fl.BoolVar(&opts.Unpack, "unpack", false, "also unpack into containerd's snapshotter (first start does no work)")
	fl.BoolVar(&opts.DryRun, "dry-run", false, "report what is missing and exit 5 if anything is")
	fl.IntVarP(&opts.Concurrency, "jobs", "j", 4, "blobs fetched at once")
	cmdutil.Alias(fl, "concurrency", "jobs")
	fl.StringVar(&opts.LimitRate, "limit-rate", "", "cap registry reads, bytes per second (e.g. 100MiB, 50M, 1000000)")
	fl.StringVar(&opts.ReadyFile, "ready-file", "", "write this marker file when ready (removed when not)")
	fl.BoolVar(&opts.JSON, "json", false, "print one JSON report on stdout (schema kiln.warm/v1)")
	cmdutil.Resumes(cmdutil.SetSchema(cmd, "kiln.warm/v1"))
	cmdutil.ProgressFlag(fl, &opts.Progress)
	fl.StringVar(&opts.Compression, "compression", "auto", "auto (zstd variant when there is one and the target runs it), gzip, zstd")
	fl.StringVar(&opts.Snapshotter, "snapshotter", "auto", "containerd snapshotter for --unpack (auto: erofs for EROFS images, or when it works and the tag names its EROFS form TAG-erofs; in namespace k8s.io the one the CRI starts pods on; else overlayfs, else native)")
	fl.StringVar(&opts.ErofsCache, "erofs-cache", "", "erofs: convert tar layers into this layer cache dir, by diff ID")
	fl.IntVar(&opts.UnpackConcurrency, "unpack-concurrency", containerd.DefaultUnpackConcurrency, "--unpack: layers applied at once on overlayfs (1: one at a time, each on its committed parent)")
	fl.StringVar(&opts.ChunkSize, "chunk-size", "16MiB", "Range chunk size for large blobs")
	fl.StringVar(&opts.WeightsInto, "weights-into", "", "pull the weights volume of each image's dev.kiln.weights.manifest label (and WEIGHTS arguments) into DIR")
	fl.BoolVar(&opts.NoSpaceCheck, "no-space-check", false, "skip the disk-space preflight")
	_ = fl.MarkHidden("no-space-check")
	fl.StringVar(&opts.Ingest, "ingest", "auto", "containerd: auto (write ingests directly when the content root is on this host), direct, grpc")
	fl.StringVar(&opts.ContainerdRoot, "containerd-root", "", "containerd's root or content directory (default: asked from the daemon)")
	fl.StringVar(&opts.DockerStage, "docker-stage", "", "docker: stage layers here before docker load (resumable; default "+docker.DefaultStage()+")")
	fl.BoolVar(&opts.KeepStage, "keep-stage", false, "docker: keep the staged layers after a successful load")
	fl.StringVar(&opts.VerifyKey, "verify-key", "", "refuse, before fetching any layer, an image or weights artifact not signed by this PEM public key (or a policy file naming keys per registry/repository; docs/sign.md)")
	withFleet(cmd, opts, f)
	return cmd
}

// runWarm runs one warm and prints its report. With --json exactly one
// object reaches stdout whatever happens, also when the warm fails before
// it has a report (usage, unreachable registry or target, unknown tag,
// credentials): then one with only schema, target and error.
func runWarm(ctx context.Context, opts *WarmOptions) error {
	rep, err := warmOnce(ctx, opts)
	if rep == nil {
		if err != nil && opts.JSON {
			rep = &warm.Report{Schema: warm.Schema, Target: opts.Target, Images: []warm.ImageReport{}, Blobs: []warm.BlobReport{}, Error: err.Error()}
			if spec, perr := warm.ParseTarget(opts.Target); perr == nil {
				rep.Target = spec.String()
				if spec.Kind == "containerd" {
					rep.Namespace = opts.Namespace
				}
			}
			if perr := cmdutil.WriteJSON(opts.IO.Out, rep); perr != nil {
				return perr
			}
		}
		return err
	}
	if opts.JSON {
		if err := cmdutil.WriteJSON(opts.IO.Out, rep); err != nil {
			return err
		}
	} else {
		writeWarmTable(opts.IO.Out, rep)
		writeWeightsTable(opts.IO.Out, rep.Weights)
		writeSignatures(opts.IO.Out, rep.Signatures)
	}
	if err != nil {
		return err
	}
	if opts.DryRun {
		if !rep.Ready {
			return cmdutil.SilentExit(cmdutil.ExitNotReady)
		}
		return nil
	}
	if opts.ReadyFile != "" && rep.Ready {
		if err := writeReadyFile(opts.ReadyFile, rep); err != nil {
			return fmt.Errorf("--ready-file %s: %v", opts.ReadyFile, err)
		}
	}
	return nil
}

// warmFlags is what kiln warm's flags and arguments say, checked before
// anything is read or written: the target, the images (lock files
// expanded) and weights manifests, and the transfer settings.
type warmFlags struct {
	spec         warm.TargetSpec
	comp         warm.Compression
	limit, chunk int64
	lopts        []registry.Option
	plat         v1.Platform
	// The arguments, classified and parsed once (addArg).
	refs      []layers.Ref
	manifests []warm.ManifestArg
}

// parseWarmFlags checks kiln warm's flags and reads its arguments; a
// mistake on the command line is a usage error (exit 2) naming the flag.
func parseWarmFlags(opts *WarmOptions) (*warmFlags, error) {
	if len(opts.Args) == 0 {
		return nil, cmdutil.UsageErr("warm: name at least one image or lock file")
	}
	if opts.Target == "" {
		return nil, cmdutil.UsageErr("warm: --target is required (containerd[:SOCKET], oci:DIR or docker[:SOCKET])")
	}
	spec, err := warm.ParseTarget(opts.Target)
	if err != nil {
		return nil, cmdutil.UsageErr("--target: %v", err)
	}
	if err := cmdutil.CheckProgress(opts.Progress); err != nil {
		return nil, err
	}
	opts.Progress = cmdutil.NormalizeProgress(opts.Progress)
	comp := warm.Compression(opts.Compression)
	switch comp {
	case warm.CompressionAuto, warm.CompressionGzip, warm.CompressionZstd:
	default:
		return nil, cmdutil.UsageErr("--compression: %q is not one of auto, gzip, zstd", opts.Compression)
	}
	if opts.Concurrency < 1 {
		return nil, cmdutil.UsageErr("--jobs: must be at least 1")
	}
	switch opts.Ingest {
	case containerd.IngestAuto, containerd.IngestDirect, containerd.IngestGRPC:
	default:
		return nil, cmdutil.UsageErr("--ingest: %q is not one of auto, direct, grpc", opts.Ingest)
	}
	var limit int64
	if opts.LimitRate != "" {
		if limit, err = bytesize.Parse(opts.LimitRate); err != nil || limit == 0 {
			return nil, cmdutil.UsageErr("--limit-rate: %q: want bytes per second above 0 (e.g. 100MiB)", opts.LimitRate)
		}
	}
	chunk, err := bytesize.Parse(opts.ChunkSize)
	if err != nil || chunk < 1<<20 {
		return nil, cmdutil.UsageErr("--chunk-size: %q: want at least 1MiB", opts.ChunkSize)
	}
	if opts.Unpack && spec.Kind != "containerd" {
		return nil, cmdutil.UsageErr("--unpack: only a containerd target has a snapshotter to unpack into")
	}
	if opts.UnpackConcurrency < 0 {
		return nil, cmdutil.UsageErr("--unpack-concurrency: %d: want 1 or more (0: the default)", opts.UnpackConcurrency)
	}
	if (opts.DockerStage != "" || opts.KeepStage) && spec.Kind != "docker" {
		return nil, cmdutil.UsageErr("--docker-stage, --keep-stage: only with --target docker")
	}
	lopts, err := opts.LayersOptions()
	if err != nil {
		return nil, err
	}
	plat, _ := layers.ParsePlatform(opts.Platform)
	fl := &warmFlags{spec: spec, comp: comp, limit: limit, chunk: chunk, lopts: lopts, plat: plat}
	for _, a := range opts.Args {
		if err := fl.addArg(a); err != nil {
			return nil, err
		}
	}
	return fl, nil
}

// addArg classifies one argument, once (localfile.ReadArg: the one rule
// for a file or a reference, the file read once): a weights volume
// manifest file, decoded from those bytes; a kiln.lock, decoded from them,
// whose runtime images for the platform are parsed as references; else a
// reference, parsed here and nowhere after.
func (fl *warmFlags) addArg(a string) error {
	af, err := localfile.ReadArg(a, localfile.MaxManifest)
	if err != nil {
		return cmdutil.UsageErr("%v", err)
	}
	var refs []string
	switch {
	case af == nil:
		refs = []string{a}
	case af.LockVersion > 0:
		l, err := recipes.DecodeLock(af.Path, af.Bytes)
		if err != nil {
			return fmt.Errorf("lock file %v", err)
		}
		if refs, err = l.RuntimeRefs(a, layers.PlatformString(fl.plat)); err != nil {
			return err
		}
	default:
		m, err := weights.DecodeManifestFile(af)
		if err != nil {
			return cmdutil.UsageErr("%v", err)
		}
		fl.manifests = append(fl.manifests, warm.ManifestArg{Path: a, Manifest: m})
	}
	for _, ref := range refs {
		r, err := verbkit.CheckRef("", ref, fl.lopts...)
		if err != nil {
			return err
		}
		fl.refs = append(fl.refs, r)
	}
	return nil
}

// warmOnce does the warm (warm.Run) on the target --target names, with
// kiln warm's progress display. It returns a nil report when it failed
// before there was one to print.
func warmOnce(ctx context.Context, opts *WarmOptions) (*warm.Report, error) {
	fl, err := parseWarmFlags(opts)
	if err != nil {
		return nil, err
	}
	// A stale marker must not outlive a failed or cold warm.
	if opts.ReadyFile != "" && !opts.DryRun {
		if err := os.Remove(opts.ReadyFile); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("--ready-file %s: %v", opts.ReadyFile, err)
		}
	}
	var pol *sign.Policy
	if opts.VerifyKey != "" {
		if pol, err = sign.LoadPolicy(opts.VerifyKey); err != nil {
			return nil, cmdutil.UsageErr("--verify-key %v", err)
		}
	}
	tgt, err := opts.OpenTarget(ctx, fl.spec, targets.Options{
		Namespace: opts.Namespace, Snapshotter: opts.Snapshotter, Ingest: opts.Ingest, ContainerdRoot: opts.ContainerdRoot,
		UnpackConcurrency: opts.UnpackConcurrency, ErofsCache: opts.ErofsCache,
		DockerStage: opts.DockerStage, KeepStage: opts.KeepStage,
		DryRun: opts.DryRun,
	})
	if err != nil {
		return nil, err
	}
	defer tgt.Close()
	var done atomic.Int64
	// One client per repository for the whole run: the set, the weights
	// volumes and the signature check log in once to each.
	pool := registry.NewPool(fl.lopts)
	lopts := append(fl.lopts[:len(fl.lopts):len(fl.lopts)], registry.WithPool(pool))
	ro := warm.RunOptions{
		Target: tgt, Refs: fl.refs, Manifests: fl.manifests, WeightsInto: opts.WeightsInto, Policy: pol,
		Resolve: warm.ResolveOptions{Platform: fl.plat, Layers: lopts, Blobs: pool, Compression: fl.comp},
		// One --limit-rate for the image blobs and the weights pull together.
		Options: warm.Options{
			Concurrency: opts.Concurrency, ChunkSize: fl.chunk, Limiter: warm.NewLimiter(fl.limit), DryRun: opts.DryRun,
			Unpack: opts.Unpack, SkipSpaceCheck: opts.NoSpaceCheck, Progress: &done,
		},
	}
	if fl.spec.Kind == "containerd" {
		ro.Namespace = opts.Namespace
	}
	mode := opts.Progress
	if opts.DryRun {
		mode = "none"
	}
	// The bars start once the set is resolved: one for the whole warm,
	// and one per layer while it is fetched (on a terminal; it goes when
	// the layer is in). Notices print above the bars: straight to the
	// terminal they would tear the display.
	var bars *cmdutil.Progress
	logTo := opts.IO.ErrOut
	ro.Start = func(total int64) func(b *warm.Blob) *atomic.Int64 {
		bars = cmdutil.NewProgress(opts.IO.ErrOut, mode)
		logTo = bars.Writer()
		part := bars.Parts("warming "+tgt.String(), total, &done)
		return func(b *warm.Blob) *atomic.Int64 {
			return part("  layer "+cmdutil.Short(b.Digest.String()), b.Size)
		}
	}
	if opts.Progress != "none" {
		ro.Log = func(format string, a ...any) { cmdutil.Notef(logTo, format, a...) }
	}
	ro.OnWeightsWait = func() {
		cmdutil.Notef(logTo, "waiting for another kiln weights pull into %s", opts.WeightsInto)
	}
	rep, err := warm.Run(ctx, ro)
	if bars != nil {
		bars.Stop()
	}
	if nv := (*warm.NoVolumeDirError)(nil); rep == nil && errors.As(err, &nv) {
		return nil, cmdutil.UsageErr("%v", err)
	}
	if ue := (*warm.UnverifiedError)(nil); errors.As(err, &ue) {
		err = cmdutil.Exit(cmdutil.ExitUnverified, err)
	}
	return rep, err
}

// formLine says which form of an image was warmed, when it was not the
// reference as named: its zstd form (proven the same image) or its EROFS
// form (named by the tag's manifest).
func formLine(im warm.ImageReport) string {
	switch im.Form {
	case warm.FormErofs:
		return im.Source + " (EROFS form named by " + im.Ref + ")"
	case warm.FormZstd:
		return im.Source + " (zstd form of " + im.Ref + ", the same image)"
	}
	return ""
}

func writeWarmTable(w io.Writer, rep *warm.Report) {
	o := termtable.Resolve(cmdutil.TableOptions(w)...)
	t := termtable.New(o, termtable.Column{Head: "IMAGE", Shrink: true, Min: 20}, termtable.Column{Head: "PLATFORM"}, termtable.Column{Head: "DIGEST"})
	for _, im := range rep.Images {
		name := im.Ref
		if im.Source != "" {
			name += " (from " + im.Source + ")"
		}
		t.Row(name, im.Platform, cmdutil.Short(im.Digest))
	}
	t.Write(w)
	for _, im := range rep.Images {
		if f := formLine(im); f != "" {
			termtable.Fprintw(w, o.Width-1, "form: ", "      ", f)
		}
		if im.Note != "" {
			termtable.Fprintw(w, o.Width-1, "note: ", "      ", im.Note)
		}
	}
	fmt.Fprintln(w)
	t = termtable.New(o, termtable.Column{Head: "BLOB", Right: true}, termtable.Column{Head: "KIND", Right: true}, termtable.Column{Head: "SIZE", Right: true},
		termtable.Column{Head: "STATE", Right: true}, termtable.Column{Head: "FETCHED", Right: true}, termtable.Column{Head: "SECONDS", Right: true})
	for _, b := range rep.Blobs {
		t.Row(cmdutil.Short(b.Digest), b.Kind, bytesize.Format(b.Size), b.State, bytesize.Format(b.BytesFetched), fmt.Sprintf("%.2f", b.Seconds))
	}
	t.Style(func(row, col int, s string) string {
		if col == 3 && row >= 0 {
			return termtable.Paint(true, stateColor[rep.Blobs[row].State], s)
		}
		return s
	})
	t.Write(w)
	verdict, color := "READY", termtable.Green
	switch {
	case rep.DryRun && !rep.Ready:
		verdict, color = "COLD", termtable.Yellow
	case !rep.Ready:
		verdict, color = "NOT READY", termtable.Red
	}
	rate := ""
	if rep.FetchedBytes > 0 && rep.Seconds > 0 {
		rate = fmt.Sprintf(" (%s/s)", bytesize.Format(int64(float64(rep.FetchedBytes)/rep.Seconds)))
	}
	// What an interrupted run left and this one kept, as weights pull
	// says it: "fetched X, resumed Y".
	resumed := ""
	if rep.ResumedBytes > 0 {
		resumed = ", resumed " + bytesize.Format(rep.ResumedBytes)
	}
	// rep.Error is not repeated here: the error comes back to
	// cmdutil.Execute, which prints it once.
	fmt.Fprintln(w)
	if rep.Snapshotter == containerd.SnapshotterErofs {
		termtable.Fprintw(w, o.Width-1, "", "    ", "unpacked into containerd's EROFS snapshotter: start containers with it (ctr run --snapshotter erofs; CRI: snapshotter = \"erofs\")")
	}
	writeVerdict(w, o, fmt.Sprintf("%s: present %s, fetched %s%s%s, missing %s, %.1fs", rep.Target, bytesize.Format(rep.PresentBytes), bytesize.Format(rep.FetchedBytes), rate, resumed, bytesize.Format(rep.MissingBytes), rep.Seconds), verdict, color)
}

// stateColor paints a blob's or a volume's state on a terminal, as host
// check paints PASS, WARN and FAIL: what is in place green, what is
// missing yellow, what failed red.
var stateColor = map[string]string{
	warm.StatePresent: termtable.Green, warm.StateFetched: termtable.Green, warm.StateWritten: termtable.Green,
	warm.StateMissing: termtable.Yellow, warm.StateFailed: termtable.Red,
}

// writeVerdict writes "TEXT: VERDICT", wrapped one column short of the
// width (the last column stays free) with the verdict whole on the last
// line, painted in color when o colours.
func writeVerdict(w io.Writer, o termtable.Options, text, verdict, color string) {
	word := strings.ReplaceAll(verdict, " ", "_") // wrapped as one word
	lines := termtable.Wrap(termtext.Clean(text)+": "+word, o.Width-1, "    ")
	last := len(lines) - 1
	lines[last] = strings.TrimSuffix(lines[last], word) + termtable.Paint(o.Color, color, verdict)
	fmt.Fprintln(w, strings.Join(lines, "\n"))
}

func writeReadyFile(p string, rep *warm.Report) error {
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	b, err := json.Marshal(struct {
		Schema string             `json:"schema"`
		Target string             `json:"target"`
		Images []warm.ImageReport `json:"images"`
		At     string             `json:"ready_at"`
		// Verified: what --verify-key checked (digest, key, format).
		Verified []*sign.Result `json:"verified,omitempty"`
	}{"kiln.warm.ready/v1", rep.Target, rep.Images, time.Now().UTC().Format(time.RFC3339), rep.Signatures})
	if err != nil {
		return err
	}
	return atomicfile.WriteFile(p, append(b, '\n'), 0o644)
}
