package compatcmd

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/spf13/cobra"

	"github.com/kiln-build/kiln/cmd/kiln/internal/cmdutil"
	"github.com/kiln-build/kiln/cmd/kiln/internal/verbkit"
	"github.com/kiln-build/kiln/internal/atomicfile"
	"github.com/kiln-build/kiln/internal/redact"
	"github.com/kiln-build/kiln/recipes"
	"github.com/kiln-build/kiln/recipes/refresh"
	"github.com/kiln-build/kiln/registry"
)

// DefaultRefreshOutput is where kiln compat refresh writes the data file.
const DefaultRefreshOutput = "kiln-compat.json"

// CompatRefreshOptions are kiln compat refresh's inputs.
type CompatRefreshOptions struct {
	IO               *cmdutil.IO
	Output           string
	Diff             string
	Check            bool
	JSON             bool
	IndexURL         string
	MatrixURL        string
	Repository       string
	Variants         []string
	InsecureRegistry []string
	// CompatData is the data refreshed and diffed against ("": the
	// environment's, else the embedded data).
	CompatData string
	// Test seams: nil means the real clients and clock.
	HTTP   *http.Client
	Remote []remote.Option
	Now    func() time.Time
}

// NewCmdCompatRefresh is kiln compat refresh.
// runF, when not nil, gets the parsed options instead of the
// command running (tests stop there).
func NewCmdCompatRefresh(f *verbkit.Factory, runF func(*CompatRefreshOptions) error) *cobra.Command {
	ios := f.IO
	opts := &CompatRefreshOptions{IO: ios}
	cmd := &cobra.Command{
		Use:   "refresh [-o FILE] [--check]",
		Short: "Regenerate the torch and nvidia/cuda facts from their live sources, with a reviewed diff",
		Long: `Reads the sources kiln's torch, torchvision/torchaudio and nvidia/cuda facts
come from: PyTorch's release matrix (RELEASE.md), the per-CUDA-variant wheel
indexes (PEP 503/691, download.pytorch.org/whl/cu126/torch/ ...) and the
registry's tag list of nvidia/cuda. Writes a data file (-o, default
kiln-compat.json) and prints the diff against the data in use: every fact
added, removed or changed, with the source URL and the date it was read.
Nothing replaces kiln's embedded data: resolve, lock and build use the file
only when given --compat-data FILE or KILN_COMPAT_DATA=FILE.

Wheels an index lists for a CUDA variant the release matrix does not name
(torch 2.11.0+cu129) are kept as unofficial: never picked unless a recipe's
torch.variant names them.

--check writes nothing and exits 1 when anything changed (for CI).
JSON keys: output, written, data_version, base_data_version, generated,
summary {added, removed, changed}, changes [{kind, fact, old, new, note,
source, date}], sources; a failure is {"error"}.`,
		Example: `  kiln compat refresh -o compat.json
  kiln resolve --compat-data compat.json
  KILN_COMPAT_DATA=compat.json kiln lock
  kiln compat refresh --check --json | jq .summary
  kiln compat refresh --repository mirror.internal:5000/nvidia/cuda --index https://mirror.internal/whl`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return cmdutil.Run(cmd.Context(), opts, runF, runCompatRefresh)
		},
	}
	fl := cmd.Flags()
	fl.StringVarP(&opts.Output, "output", "o", DefaultRefreshOutput, "data file to write")
	fl.StringVar(&opts.Diff, "diff", "", "also write the reviewed diff, as text, to this file")
	fl.BoolVar(&opts.Check, "check", false, "write nothing; exit 1 when a fact changed")
	fl.BoolVar(&opts.JSON, "json", false, "print the result as one JSON object")
	cmdutil.SetSchema(cmd, "kiln.compat-refresh/v1")
	fl.StringVar(&opts.IndexURL, "index", "", "root of the per-variant wheel indexes (default https://download.pytorch.org/whl)")
	fl.StringVar(&opts.MatrixURL, "matrix", refresh.DefaultMatrixURL, "PyTorch's RELEASE.md with the Release Compatibility Matrix")
	fl.StringVar(&opts.Repository, "repository", refresh.DefaultRepository, "nvidia/cuda repository whose tags are listed (REGISTRY/REPO for a mirror)")
	fl.StringSliceVar(&opts.Variants, "variant", nil, "also read this variant's index (cu129, ...; repeatable)")
	fl.StringSliceVar(&opts.InsecureRegistry, "insecure-registry", nil, "registry host that speaks plain HTTP (repeatable; loopback hosts always may)")
	fl.StringVar(&opts.CompatData, "compat-data", "", "data to refresh and diff against (default $"+recipes.DataEnv+"; unset: kiln's embedded data)")
	return cmd
}

// refreshResult is kiln compat refresh's JSON.
type refreshResult struct {
	Output          *string              `json:"output"`
	Written         bool                 `json:"written"`
	DataVersion     string               `json:"data_version"`
	BaseDataVersion string               `json:"base_data_version"`
	Generated       string               `json:"generated"`
	Summary         map[string]int       `json:"summary"`
	Changes         []recipes.DataChange `json:"changes"`
	Sources         []recipes.DataSource `json:"sources"`
}

func runCompatRefresh(ctx context.Context, opts *CompatRefreshOptions) error {
	fail := func(err error) error {
		if opts.JSON {
			_ = cmdutil.WriteJSON(opts.IO.Out, map[string]any{"error": redact.String(err.Error())})
		}
		return err
	}
	if !opts.Check && opts.Output == "" {
		return fail(cmdutil.UsageErr("-o: a file to write (or --check)"))
	}
	base, err := (&verbkit.RecipeFlags{CompatData: opts.CompatData}).LoadCompatData()
	if err != nil {
		return fail(err)
	}
	reg := []registry.Option{registry.WithInsecureRegistries(opts.InsecureRegistry...)}
	ro := refresh.Options{
		Base: base, IndexURL: opts.IndexURL, MatrixURL: opts.MatrixURL, Repository: opts.Repository,
		Variants: opts.Variants, HTTP: opts.HTTP, Registry: reg, Remote: opts.Remote, Now: opts.Now,
	}
	if ro.HTTP == nil {
		ro.HTTP = registry.HTTPClient(reg)
	}
	if !opts.JSON {
		fmt.Fprintf(opts.IO.ErrOut, "reading the PyTorch release matrix, wheel indexes and %s tags...\n", ro.Repository)
	}
	f, err := refresh.Run(ctx, ro)
	if err != nil {
		return fail(err)
	}
	var diff bytes.Buffer
	if err := refresh.WriteDiff(&diff, f); err != nil {
		return fail(err)
	}
	res := refreshResult{DataVersion: f.DataVersion, BaseDataVersion: f.BaseDataVersion, Generated: f.Generated, Summary: refresh.Summary(f.Changes), Changes: f.Changes, Sources: f.Sources}
	if !opts.Check {
		b, err := json.MarshalIndent(f, "", " ")
		if err != nil {
			return fail(err)
		}
		if err := atomicfile.WriteFile(opts.Output, append(b, '\n'), 0o644); err != nil {
			return fail(fmt.Errorf("-o %s: %w", opts.Output, err))
		}
		res.Output, res.Written = &opts.Output, true
	}
	if opts.Diff != "" {
		if err := os.WriteFile(opts.Diff, diff.Bytes(), 0o644); err != nil {
			return fail(fmt.Errorf("--diff %s: %w", opts.Diff, err))
		}
	}
	if opts.JSON {
		if err := cmdutil.WriteJSON(opts.IO.Out, res); err != nil {
			return err
		}
	} else {
		opts.IO.Out.Write(diff.Bytes())
		if res.Written {
			fmt.Fprintf(opts.IO.Out, "wrote %s (data %s); kiln still uses its embedded data unless given --compat-data %s or %s=%s\n", opts.Output, f.DataVersion, opts.Output, recipes.DataEnv, opts.Output)
		}
	}
	if opts.Check && len(f.Changes) > 0 {
		return cmdutil.SilentExit(cmdutil.ExitFailure)
	}
	return nil
}
