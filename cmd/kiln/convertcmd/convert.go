package convertcmd

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync/atomic"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/spf13/cobra"

	"github.com/kiln-build/kiln/cmd/kiln/internal/cmdutil"
	"github.com/kiln-build/kiln/cmd/kiln/internal/verbkit"
	"github.com/kiln-build/kiln/convert"
	"github.com/kiln-build/kiln/internal/bytesize"
	"github.com/kiln-build/kiln/internal/termtable"
	"github.com/kiln-build/kiln/layers"
	"github.com/kiln-build/kiln/layers/erofs"
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
	Erofs       string
	Level       int
	Jobs        int
	TempDir     string
	JSON        bool
	Progress    string
	verbkit.SignFlag
	verbkit.ImageFlags
}

// NewCmdConvert is kiln convert IMAGE.
// runF, when not nil, gets the parsed options instead of the
// command running (tests stop there).
func NewCmdConvert(f *verbkit.Factory, runF func(*ConvertOptions) error) *cobra.Command {
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
Docker >= 23.0).

--format erofs writes native EROFS layers (application/vnd.erofs.layer.v1)
to REPO:TAG-erofs: each layer a filesystem image that containerd's EROFS
snapshotter mounts as it is, with no untar at a cold start. The blocks are
compressed inside (--erofs-compression, lz4hc by default: docs/erofs.md),
so zeroed GPU code costs no disk; the same source gives the same digest.
It needs mkfs.erofs and fsck.erofs from erofs-utils 1.7 or later; a layer
kiln's own tar reader refuses (or one of its images fsck.erofs refuses) fails
the conversion, naming the layer. kiln warm --unpack into the EROFS
snapshotter takes REPO:TAG-erofs for REPO:TAG only when TAG's manifest
names it, which convert cannot write (TAG's digest may be pinned or
signed): kiln slim --format erofs publishes both so.`,
		Example: `  kiln convert 127.0.0.1:5000/acme/serve:1.2 --compression zstd
  kiln convert 127.0.0.1:5000/acme/serve:1.2 --to 127.0.0.1:5000/acme/serve:1.2-zstd --level 9
  kiln convert oci:./out:app --to oci:./out:app-zstd --json
  kiln convert 127.0.0.1:5000/acme/serve:1.2 --format erofs`,
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
	fl.StringVar(&opts.Format, "format", "oci", "oci (--compression); estargz: gzip laid out for lazy pulls by the stargz snapshotter, the --startup-list files first (default for REPO:TAG: REPO:TAG-estargz); or erofs: native EROFS layers for containerd's EROFS snapshotter (REPO:TAG-erofs)")
	fl.StringVar(&opts.Erofs, "erofs-compression", string(erofs.DefaultCompression), "with --format erofs: the compression inside each EROFS image (none, lz4, lz4hc, zstd, lzma)")
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
	Schema string `json:"schema"`
	From   string `json:"from"`
	To     string `json:"to"`
	Digest string `json:"digest"`
	Level  int    `json:"level"`
	Format string `json:"format"` // oci (zstd), estargz or erofs
	// ErofsCompression is the compression inside --format erofs layers.
	ErofsCompression string                `json:"erofs_compression,omitempty"`
	Layers           []convert.LayerReport `json:"layers"`
	Before           int64                 `json:"compressed_before"`
	After            int64                 `json:"compressed_after"`
	// Signed is the --sign-key signature of what was written.
	Signed *sign.Signed `json:"signed,omitempty"`
	// Note, for --format erofs, says when kiln warm uses what was
	// written (erofsNote).
	Note string `json:"note,omitempty"`
}

// erofsNote says that kiln warm takes the EROFS form (to) of from only
// when from's manifest names it, which convert cannot make so: from's
// digest may be pinned or signed.
func erofsNote(from, to string) string {
	return fmt.Sprintf("kiln warm --unpack takes %s for %s only when %s names it (its manifest's %s annotation); convert cannot rewrite %s (its digest may be pinned or signed): publish both with kiln slim --format erofs", to, from, from, layers.AnnotationErofsManifest, from)
}

func runConvert(ctx context.Context, opts *ConvertOptions) error {
	if opts.Compression != "zstd" {
		return cmdutil.UsageErr("--compression: %q: only zstd is supported", opts.Compression)
	}
	suffix := layers.ZstdTagSuffix
	var startup []string
	if opts.StartupList != "" && opts.Format != "estargz" {
		return cmdutil.UsageErr("--startup-list needs --format estargz")
	}
	ecomp, err := erofs.ParseCompression(opts.Erofs)
	if err != nil {
		return cmdutil.UsageErr("--erofs-compression: %v", err)
	}
	switch opts.Format {
	case "oci", "":
	case "erofs":
		suffix = layers.ErofsTagSuffix
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
		return cmdutil.UsageErr("--format: %q is not one of oci, estargz, erofs", opts.Format)
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
	r, err := verbkit.CheckRef("", opts.Image, lopts...)
	if err != nil {
		return err
	}
	// IMAGE and --to parsed here, once: what reads and writes them takes
	// the parsed references.
	var toRef layers.Ref
	if opts.To == "" {
		_, tagged := r.Name.(name.Tag)
		if r.Kind != layers.KindRegistry || !tagged {
			return cmdutil.UsageErr("--to is required unless IMAGE is a registry REPO:TAG (then REPO:TAG%s)", suffix)
		}
		if toRef, err = r.Variant(suffix); err != nil {
			return cmdutil.UsageErr("--to: %v", err)
		}
	} else if toRef, err = layers.ParseRef(opts.To, lopts...); err != nil {
		return cmdutil.UsageErr("--to: %v", err)
	}
	to := toRef.String()
	if opts.Format == "erofs" {
		if toRef.Kind == layers.KindDockerArchive {
			return cmdutil.UsageErr("--to %s: a docker archive holds tar layers for docker load; write --format erofs to a registry or oci:DIR", to)
		}
		if err := erofs.Check(ctx); err != nil {
			return err
		}
	}
	if err := opts.SignFlag.CheckDest(toRef); err != nil {
		return err
	}
	key, err := opts.SignFlag.LoadSigner()
	if err != nil {
		return err
	}
	li, err := layers.Open(ctx, r, lopts...)
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
	var done atomic.Int64
	bar := cmdutil.StartProgress(opts.IO.ErrOut, opts.Progress, "converting "+opts.Image, li.CompressedSize(), &done)
	co := convert.Options{Level: opts.Level, Jobs: opts.Jobs, TempDir: opts.TempDir, Progress: &done}
	conv := func(ctx context.Context, src v1.Image) (res *convert.Result, err error) {
		switch opts.Format {
		case "estargz":
			res, err = convert.ToEStargz(ctx, src, co, startup)
		case "erofs":
			// The one EROFS conversion, as build and slim make it.
			res, err = publish.Erofs(co, ecomp)(ctx, src)
		default:
			res, err = convert.ToZstd(ctx, src, co)
		}
		bar.Stop()
		if err != nil {
			return nil, fmt.Errorf("convert %s: %w", opts.Image, err)
		}
		return res, nil
	}
	pub := publish.WithSign(publish.Writer(lopts...), opts.SignFlag.Signer(key, lopts))
	v, err := publish.PublishVariant(ctx, pub, conv, src, toRef)
	if err != nil {
		return err
	}
	signed := v.Signed
	rep := convertReport{Schema: "kiln.convert/v1", From: opts.Image, To: to, Digest: v.Digest.String(), Level: opts.Level, Format: "oci", Layers: v.Layers, Signed: signed}
	col, decode := "ZSTD", "ZSTD DECODE"
	switch opts.Format {
	case "estargz":
		rep.Format, col = "estargz", "ESTARGZ"
	case "erofs":
		// An EROFS layer is decoded by the kernel as it is read, not here.
		rep.Format, col, decode = "erofs", "EROFS", ""
		rep.ErofsCompression = string(ecomp)
		rep.Note = erofsNote(opts.Image, to)
	}
	for _, l := range v.Layers {
		rep.Before += l.FromSize
		rep.After += l.ToSize
	}
	if opts.JSON {
		return cmdutil.WriteJSON(opts.IO.Out, rep)
	}
	// The layer's ID as docker prints an image's (12 hex digits, no
	// algorithm): the table fits 80 columns; --json has the digests.
	right := func(h string) termtable.Column { return termtable.Column{Head: h, Right: true} }
	tb := termtable.New(termtable.Resolve(cmdutil.TableOptions(opts.IO.Out)...), right("LAYER"), termtable.Column{Head: "FROM"},
		right("GZIP"), right(col), right("RATIO"), right("GZIP DECODE"), right(decode))
	for _, l := range v.Layers {
		to := fmt.Sprintf("%.2fs", l.ToDecode)
		if decode == "" {
			to = ""
		}
		id := strings.TrimPrefix(cmdutil.Short(l.From), "sha256:")
		tb.Row(fmt.Sprint(l.Index), id, bytesize.Format(l.FromSize), bytesize.Format(l.ToSize), fmt.Sprintf("%.3f", l.Ratio), fmt.Sprintf("%.2fs", l.FromDecode), to)
	}
	if err := tb.Write(opts.IO.Out); err != nil {
		return err
	}
	ratio := 0.0
	if rep.Before > 0 {
		ratio = float64(rep.After) / float64(rep.Before)
	}
	// The references and the whole digest (to pin the image) on lines of
	// their own: on one line they run past 80 columns.
	fmt.Fprintf(opts.IO.Out, "\nfrom  %s\nwrote %s (%s)\n      %s\n      %s → %s (%.3f)\n", opts.Image, to, strings.ToLower(col), rep.Digest, bytesize.Format(rep.Before), bytesize.Format(rep.After), ratio)
	if signed != nil {
		fmt.Fprintf(opts.IO.Out, "signed %s with key %s (%s)\n", cmdutil.Short(signed.Digest), signed.KeyID, signed.Format)
	}
	if rep.Note != "" {
		termtable.Fprintw(opts.IO.Out, termtable.Resolve(cmdutil.TableOptions(opts.IO.Out)...).Width, "note: ", "      ", rep.Note)
	}
	return nil
}
