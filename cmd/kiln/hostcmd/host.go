package hostcmd

import (
	"context"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/kiln-build/kiln/analyze"
	"github.com/kiln-build/kiln/cmd/kiln/internal/cmdutil"
	"github.com/kiln-build/kiln/cmd/kiln/internal/verbkit"
	"github.com/kiln-build/kiln/hostcheck"
	"github.com/kiln-build/kiln/internal/bytesize"
	"github.com/kiln-build/kiln/internal/localfile"
	"github.com/kiln-build/kiln/layers"
	"github.com/kiln-build/kiln/recipes"
	"github.com/kiln-build/kiln/registry"
	"github.com/kiln-build/kiln/sign"
)

// HostCheckOptions are kiln host check's inputs.
type HostCheckOptions struct {
	IO    *cmdutil.IO
	Image string
	// VerifyKey is --verify-key PUBKEY|POLICY: the signature item
	// verifies instead of listing.
	VerifyKey   string
	HostInfo    string
	Root        string
	Volumes     []string
	JSON        bool
	Capture     bool
	NoKernels   bool
	WeightsSize string
	// ContainerdConfig and DockerDaemonConfig are --containerd-config and
	// --docker-config: the runtime configs the runtime-settings item reads.
	ContainerdConfig   string
	DockerDaemonConfig string
	Jobs               int
	Progress           string
	verbkit.ImageFlags
}

func NewCmdHost(f *verbkit.Factory) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "host",
		Short: "Check a GPU host for an image",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return cmdutil.UsageErr("host needs a subcommand: check")
		},
	}
	cmd.AddCommand(NewCmdHostCheck(f, nil))
	return cmd
}

// NewCmdHostCheck is kiln host check.
// runF, when not nil, gets the parsed options instead of the
// command running (tests stop there).
func NewCmdHostCheck(f *verbkit.Factory, runF func(*HostCheckOptions) error) *cobra.Command {
	ios := f.IO
	opts := &HostCheckOptions{IO: ios, ImageFlags: f.ImageFlags()}
	cmd := &cobra.Command{
		Use:   "check [--image REF|LOCK|RECIPE] [--volume DIR...] [--json]",
		Short: "Will this image start and use the GPU on this host?",
		Long: `Checks what decides whether a CUDA container starts and uses the GPU, each
item pass, warn, fail or skip with its evidence and the fix:

  driver             driver version, GPUs, compute capabilities, the CUDA
                     version the driver supports (nvidia-smi, /proc)
  cuda-compat        the image's CUDA on this driver: native, minor-version
                     or forward compatibility (data-center GPUs only)
  require-cuda       the image's NVIDIA_REQUIRE_CUDA, evaluated per GPU the
                     way the NVIDIA container runtime does
  kernels            SASS/PTX in the image's fat binaries (or the recipe's
                     declared architectures) against every GPU
  container-toolkit  NVIDIA Container Toolkit registered with Docker or
                     containerd, or CDI specs in /etc/cdi, /var/run/cdi
  engine             Docker/containerd sockets answering; build or run only
  registry-auth      credentials for the image's registry (never printed)
  volumes            --volume dirs exist, writable, filesystem, free space;
                     the engine's image store has room for the image
  compose            Docker Compose installed
  runtime-settings   containerd's config (snapshotter, discard_unpacked_layers,
                     concurrent downloads/unpacks, sync fs, local pull,
                     hosts.toml mirrors: Spegel, Dragonfly) and daemon.json
                     (max-concurrent-downloads, storage driver, mirrors),
                     each with the setting to change and its effect

--image takes an image reference, a kiln.lock or a kiln.yaml recipe (resolved
offline as kiln lock would: the recipe's CUDA, torch wheels and architectures;
nothing is pulled). --host-info FILE checks a captured
description instead of this machine (kiln host check --capture > host.json on
the host), to plan before renting. --root DIR reads another root (a mounted
host image, a test sysroot).

Exit codes: 0 no item failed, 1 an item failed, 2 usage. --json: docs/hostcheck.md.`,
		Example: `  kiln host check
  kiln host check --image ghcr.io/acme/serve:1.2 --volume /data/models --weights-size 30GB
  kiln host check --image recipes/kiln.lock --json
  kiln host check --capture --volume /data > host.json
  kiln host check --host-info host.json --image 127.0.0.1:5000/acme/serve:1.2`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return cmdutil.Run(cmd.Context(), opts, runF, runHostCheck)
		},
	}
	opts.ImageFlags.Register(cmd)
	fl := cmd.Flags()
	fl.StringVar(&opts.Image, "image", "", "image reference or kiln.lock to check against the host")
	fl.StringVar(&opts.VerifyKey, "verify-key", "", "with --image: verify the image's cosign signature with this PEM public key or policy file")
	fl.StringVar(&opts.HostInfo, "host-info", "", "check a captured host description (JSON from --capture) instead of this machine")
	fl.StringVar(&opts.Root, "root", "/", "root directory to read the host from (/proc, /etc, sockets)")
	fl.StringSliceVar(&opts.Volumes, "volume", nil, "directory for persistent data to probe (repeatable)")
	fl.BoolVar(&opts.JSON, "json", false, "print the report as JSON (schema: docs/hostcheck.md)")
	cmdutil.SetSchema(cmd, "kiln.host-check/v1")
	fl.BoolVar(&opts.Capture, "capture", false, "print this host's description as JSON (for --host-info) and exit")
	fl.BoolVar(&opts.NoKernels, "no-kernels", false, "do not stream the image's layers for fat binaries; read only its config")
	fl.StringVar(&opts.ContainerdConfig, "containerd-config", "", "containerd config to read (default /etc/containerd/config.toml under --root; its imports too)")
	fl.StringVar(&opts.DockerDaemonConfig, "docker-config", "", "Docker daemon.json to read (default /etc/docker/daemon.json under --root)")
	fl.StringVar(&opts.WeightsSize, "weights-size", "", "size of the model weights the volumes must hold (e.g. 30GB)")
	fl.IntVarP(&opts.Jobs, "jobs", "j", 0, "layers read at once (default: CPUs, at most 4)")
	cmdutil.ProgressFlag(fl, &opts.Progress)
	return cmd
}

func runHostCheck(ctx context.Context, opts *HostCheckOptions) error {
	if err := cmdutil.CheckProgress(opts.Progress); err != nil {
		return err
	}
	if opts.Capture && opts.HostInfo != "" {
		return cmdutil.UsageErr("--capture describes this machine; it does not combine with --host-info")
	}
	if opts.HostInfo != "" && len(opts.Volumes) > 0 {
		return cmdutil.UsageErr("--volume probes this machine; with --host-info the description's volumes are checked (capture them with --capture --volume DIR)")
	}
	if opts.HostInfo != "" && (opts.ContainerdConfig != "" || opts.DockerDaemonConfig != "") {
		return cmdutil.UsageErr("--containerd-config and --docker-config read this machine; with --host-info the description's runtime settings are checked")
	}
	var weights int64
	if opts.WeightsSize != "" {
		n, err := bytesize.Parse(opts.WeightsSize)
		if err != nil {
			return cmdutil.UsageErr("--weights-size: %v", err)
		}
		weights = n
	}
	lopts, err := opts.LayersOptions()
	if err != nil {
		return err
	}
	// The image's registry, for the credentials probe.
	var registries []string
	// --image read once: a lock's bytes are decoded below.
	af, err := localfile.ReadArg(opts.Image, localfile.MaxConfig)
	if err != nil {
		return cmdutil.UsageErr("--image: %v", err)
	}
	lock := af != nil && af.LockVersion > 0
	if af != nil && !lock {
		return cmdutil.UsageErr("--image %s: a JSON file of mediaType %q, not an image reference, a kiln.lock or a kiln.yaml", opts.Image, af.MediaType)
	}
	recipe := !lock && isRecipeFile(opts.Image)
	if opts.Image != "" && !lock && !recipe {
		ref, err := layers.ParseRef(opts.Image, lopts...)
		if err != nil {
			return cmdutil.UsageErr("--image: %v", err)
		}
		if ref.Kind == layers.KindRegistry && ref.Name != nil {
			registries = append(registries, ref.Name.Context().RegistryStr())
		}
	}
	var h *hostcheck.Host
	if opts.HostInfo != "" {
		if h, err = hostcheck.LoadHost(opts.HostInfo); err != nil {
			return cmdutil.UsageErr("--host-info: %v", err)
		}
	} else {
		if fi, err := os.Stat(opts.Root); err != nil || !fi.IsDir() {
			return cmdutil.UsageErr("--root %s: not a directory", opts.Root)
		}
		if h, err = hostcheck.Gather(ctx, hostcheck.GatherOptions{Root: opts.Root, Volumes: opts.Volumes, Registries: registries,
			ContainerdConfig: opts.ContainerdConfig, DockerDaemonConfig: opts.DockerDaemonConfig}); err != nil {
			return err
		}
	}
	if opts.Capture {
		b, err := h.Marshal()
		if err != nil {
			return err
		}
		_, err = opts.IO.Out.Write(b)
		return err
	}
	var im *hostcheck.Image
	var imageErr string
	switch {
	case lock:
		l, err := recipes.DecodeLock(af.Path, af.Bytes)
		if err != nil {
			return cmdutil.UsageErr("--image: %v", err)
		}
		im = hostcheck.ImageFromLock(opts.Image, l)
	case recipe:
		r, err := recipes.Load(opts.Image)
		if err != nil {
			return cmdutil.UsageErr("--image: %v", err)
		}
		plan, err := recipes.Resolve(ctx, r)
		if err != nil {
			return cmdutil.UsageErr("--image %s: %v", opts.Image, err)
		}
		im = hostcheck.ImageFromLock(opts.Image, &recipes.Lock{Plan: plan})
		im.Source = "recipe"
	case opts.Image != "":
		ref, err := verbkit.CheckRef("--image", opts.Image, lopts...)
		if err != nil {
			return err
		}
		img, err := layers.Open(ctx, ref, lopts...)
		if err != nil {
			if ctx.Err() != nil {
				return err
			}
			// The host is checked all the same: the report says why the
			// image could not be read (a refused password, a missing tag)
			// beside everything else it found.
			imageErr = registry.RedactError(err).Error()
			break
		}
		defer img.Close()
		o := analyze.Options{Concurrency: opts.Jobs}
		var bars *cmdutil.Progress
		if !opts.NoKernels {
			bars = cmdutil.NewProgress(opts.IO.ErrOut, opts.Progress)
			o.LayerProgress = verbkit.LayerBars(bars, "reading fat binaries in "+img.Ref.Raw, img)
		}
		im, err = hostcheck.FromLayers(ctx, img, !opts.NoKernels, o)
		if bars != nil {
			bars.Stop()
		}
		if err != nil {
			return err
		}
	}
	ho := hostcheck.Options{WeightsBytes: weights}
	if imageErr != "" {
		ho.ImageRef, ho.ImageError = opts.Image, imageErr
	} else if im != nil && !lock && !recipe {
		if ho.Signature, err = inspectSignature(ctx, opts.Image, opts.VerifyKey, lopts); err != nil {
			return err
		}
	} else if opts.VerifyKey != "" {
		return cmdutil.UsageErr("--verify-key: needs --image naming a registry image")
	}
	rep := hostcheck.Check(h, im, ho)
	if opts.JSON {
		if err := cmdutil.WriteJSON(opts.IO.Out, rep); err != nil {
			return err
		}
	} else if err := rep.WriteTable(opts.IO.Out, cmdutil.TableOptions(opts.IO.Out)...); err != nil {
		return err
	}
	if !rep.OK {
		return cmdutil.ReportedExit(cmdutil.ExitFailure, "host check: %d item(s) failed%s", rep.Counts.Fail, firstFailure(rep))
	}
	return nil
}

// isRecipeFile says whether --image names a kiln.yaml recipe: a regular
// file named *.yaml or *.yml (an image reference never ends so).
func isRecipeFile(arg string) bool {
	if !strings.HasSuffix(arg, ".yaml") && !strings.HasSuffix(arg, ".yml") {
		return false
	}
	fi, err := os.Stat(arg)
	return err == nil && fi.Mode().IsRegular()
}

// inspectSignature is sign.Inspect of a registry image, verified with
// --verify-key's policy when it is given (nil for any other image). Only
// a bad key file is an error: host check reports the registry, and does
// not gate on it.
func inspectSignature(ctx context.Context, ref, key string, lopts []registry.Option) (*sign.Inspection, error) {
	if r, err := layers.ParseRef(ref, lopts...); err != nil || r.Kind != layers.KindRegistry {
		return nil, nil
	}
	var pol *sign.Policy
	if key != "" {
		var err error
		if pol, err = sign.LoadPolicy(key); err != nil {
			return nil, cmdutil.UsageErr("--verify-key %v", err)
		}
	}
	return sign.Inspect(ctx, ref, pol, lopts...), nil
}

// firstFailure is ": ID: summary" of the report's first failed item, for
// the one-line error (--json's "error").
func firstFailure(rep *hostcheck.Report) string {
	for _, it := range rep.Items {
		if it.Status == hostcheck.Fail {
			return ": " + it.ID + ": " + it.Summary
		}
	}
	return ""
}
