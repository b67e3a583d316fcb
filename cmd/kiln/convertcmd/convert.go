package convertcmd

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"text/tabwriter"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/spf13/cobra"

	"github.com/kiln-build/kiln/cmd/kiln/internal/cmdutil"
	"github.com/kiln-build/kiln/convert"
	"github.com/kiln-build/kiln/internal/bytesize"
	"github.com/kiln-build/kiln/layers"
	"github.com/kiln-build/kiln/layers/publish"
	"github.com/kiln-build/kiln/sign"
)

// ConvertOptions are kiln convert's inputs.
type ConvertOptions struct {
	IO          *cmdutil.IO
	Image       string
	To          string
	Compression string
	Format      string
	StartupList string
	Level       int
	Jobs        int
	TempDir     string
	JSON        bool
	Progress    string
	cmdutil.SignFlag
	cmdutil.ImageFlags
}

// NewCmdConvert is kiln convert IMAGE.
// runF, when not nil, gets the parsed options instead of the
// command running (tests stop there).
func NewCmdConvert(f *cmdutil.Factory, runF func(*ConvertOptions) error) *cobra.Command {
	ios := f.IO
	opts := &ConvertOptions{IO: ios, ImageFlags: f.ImageFlags()}
	cmd := &cobra.Command{
		Use:   "convert IMAGE --to REF --compression zstd",
		Short: "Recompress an image's gzip layers as zstd, without a daemon",
		Long: `Streams each layer through a decoder and a zstd encoder (layers in parallel),
checks every source digest and that the uncompressed tar still matches the
config's diff ID, and writes an OCI image with the same config to --to
(a registry, oci:DIR[:TAG] or docker-archive:FILE). Reports per layer the
size ratio and the decompression time of the gzip and zstd blobs.

Without --to, a registry REPO:TAG is written to REPO:TAG-zstd: the name
kiln warm looks for when the target can run zstd layers (containerd >= 1.5,
Docker >= 23.0).`,
		Example: `  kiln convert 127.0.0.1:5000/acme/serve:1.2 --compression zstd
  kiln convert 127.0.0.1:5000/acme/serve:1.2 --to 127.0.0.1:5000/acme/serve:1.2-zstd --level 9
  kiln convert oci:./out:app --to oci:./out:app-zstd --json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Image = args[0]
			return cmdutil.Run(cmd.Context(), opts, runF, runConvert)
		},
	}
	opts.ImageFlags.Register(cmd)
	fl := cmd.Flags()
	fl.StringVar(&opts.To, "to", "", "where to write the converted image (default for REPO:TAG: REPO:TAG-zstd)")
	fl.StringVar(&opts.Compression, "compression", "zstd", "target compression (zstd)")
	fl.StringVar(&opts.Format, "format", "oci", "oci (--compression) or estargz: gzip laid out for lazy pulls by the stargz snapshotter, the --startup-list files first (default for REPO:TAG: REPO:TAG-estargz)")
	fl.StringVar(&opts.StartupList, "startup-list", "", "with --format estargz: the files the container opens as it starts, one absolute path a line (kiln slim --format estargz --probe CMD --startup-list FILE records them)")
	fl.IntVar(&opts.Level, "level", 3, "zstd level, 1-22")
	fl.IntVarP(&opts.Jobs, "jobs", "j", 0, "layers converted at once (default: CPUs)")
	fl.StringVar(&opts.TempDir, "work-dir", "", "scratch directory for converted blobs (default $TMPDIR)")
	cmdutil.Alias(fl, "tmp", "work-dir")
	fl.BoolVar(&opts.JSON, "json", false, "print the per-layer report as JSON")
	cmdutil.SetSchema(cmd, "kiln.convert/v1")
	cmdutil.ProgressFlag(fl, &opts.Progress)
	opts.SignFlag.Register(cmd)
	return cmd
}

type convertReport struct {
	Schema string                `json:"schema"`
	From   string                `json:"from"`
	To     string                `json:"to"`
	Digest string                `json:"digest"`
	Level  int                   `json:"level"`
	Format string                `json:"format"` // oci (zstd) or estargz
	Layers []convert.LayerReport `json:"layers"`
	Before int64                 `json:"compressed_before"`
	After  int64                 `json:"compressed_after"`
	// Signed is the --sign-key signature of what was written.
	Signed *sign.Signed `json:"signed,omitempty"`
}

func runConvert(ctx context.Context, opts *ConvertOptions) error {
	if opts.Compression != "zstd" {
		return cmdutil.UsageErr("--compression: %q: only zstd is supported", opts.Compression)
	}
	suffix := layers.ZstdTagSuffix
	var startup []string
	switch opts.Format {
	case "oci", "":
		if opts.StartupList != "" {
			return cmdutil.UsageErr("--startup-list needs --format estargz")
		}
	case "estargz":
		suffix = "-estargz"
		if opts.StartupList != "" {
			b, err := os.ReadFile(opts.StartupList)
			if err != nil {
				return cmdutil.UsageErr("--startup-list: %v", err)
			}
			for _, l := range strings.Split(string(b), "\n") {
				if l = strings.TrimSpace(l); l != "" {
					if !strings.HasPrefix(l, "/") {
						return cmdutil.UsageErr("--startup-list %s: %q is not an absolute path", opts.StartupList, l)
					}
					startup = append(startup, l)
				}
			}
		}
	default:
		return cmdutil.UsageErr("--format: %q is not one of oci, estargz", opts.Format)
	}
	if opts.Level < 1 || opts.Level > 22 {
		return cmdutil.UsageErr("--level: %d: want 1-22", opts.Level)
	}
	if err := cmdutil.CheckProgress(opts.Progress); err != nil {
		return err
	}
	lopts, err := opts.LayersOptions()
	if err != nil {
		return err
	}
	r, err := layers.ParseRef(opts.Image, lopts...)
	if err != nil {
		return cmdutil.UsageErr("%v", err)
	}
	to := opts.To
	if to == "" {
		t, ok := r.Name.(name.Tag)
		if r.Kind != layers.KindRegistry || !ok {
			return cmdutil.UsageErr("--to is required unless IMAGE is a registry REPO:TAG (then REPO:TAG%s)", suffix)
		}
		to = layers.VariantTag(t, suffix).String()
	}
	if _, err := layers.ParseRef(to, lopts...); err != nil {
		return cmdutil.UsageErr("--to: %v", err)
	}
	if err := opts.SignFlag.CheckDest(to, lopts); err != nil {
		return err
	}
	key, err := opts.SignFlag.LoadSigner()
	if err != nil {
		return err
	}
	li, err := layers.Open(ctx, opts.Image, lopts...)
	if err != nil {
		return err
	}
	defer li.Close()
	if n, ok := layers.SourceName(li); ok {
		// A docker archive records the source's name, as docker save would.
		lopts = append(lopts, layers.WithArchiveName(n))
	}
	src, err := li.V1(ctx)
	if err != nil {
		return err
	}
	var total int64
	if ls, err := src.Layers(); err == nil {
		for _, l := range ls {
			n, _ := l.Size()
			total += n
		}
	}
	var done atomic.Int64
	bar := cmdutil.StartProgress(opts.IO.ErrOut, opts.Progress, "converting "+opts.Image, total, &done)
	co := convert.Options{Level: opts.Level, Jobs: opts.Jobs, TempDir: opts.TempDir, Progress: &done}
	var res *convert.Result
	if opts.Format == "estargz" {
		res, err = convert.ToEStargz(ctx, src, co, startup)
	} else {
		res, err = convert.ToZstd(ctx, src, co)
	}
	bar.Stop()
	if err != nil {
		return fmt.Errorf("convert %s: %w", opts.Image, err)
	}
	defer res.Close()
	pub, err := publish.WithSign(publish.Writer(lopts...), opts.SignFlag.Signer(key, lopts)).Publish(ctx, res.Image, to)
	if err != nil {
		return err
	}
	dg, signed := pub.Digest, pub.Signed
	rep := convertReport{Schema: "kiln.convert/v1", From: opts.Image, To: to, Digest: dg.String(), Level: opts.Level, Format: "oci", Layers: res.Layers, Signed: signed}
	col := "ZSTD"
	if opts.Format == "estargz" {
		rep.Format, col = "estargz", "ESTARGZ"
	}
	for _, l := range res.Layers {
		rep.Before += l.FromSize
		rep.After += l.ToSize
	}
	if opts.JSON {
		return cmdutil.WriteJSON(opts.IO.Out, rep)
	}
	tw := tabwriter.NewWriter(opts.IO.Out, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "LAYER\tFROM\tGZIP\t%s\tRATIO\tGZIP DECODE\tZSTD DECODE\t\n", col)
	for _, l := range res.Layers {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%.3f\t%.2fs\t%.2fs\t\n", l.Index, cmdutil.Short(l.From), bytesize.Format(l.FromSize), bytesize.Format(l.ToSize), l.Ratio, l.FromDecode, l.ToDecode)
	}
	tw.Flush()
	ratio := 0.0
	if rep.Before > 0 {
		ratio = float64(rep.After) / float64(rep.Before)
	}
	fmt.Fprintf(opts.IO.Out, "\n%s → %s (%s): %s → %s (%.3f)\n", opts.Image, to, cmdutil.Short(rep.Digest), bytesize.Format(rep.Before), bytesize.Format(rep.After), ratio)
	if signed != nil {
		fmt.Fprintf(opts.IO.Out, "signed %s with key %s (%s)\n", cmdutil.Short(signed.Digest), signed.KeyID, signed.Format)
	}
	return nil
}
