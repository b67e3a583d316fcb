package fatbincmd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/kiln-build/kiln/cmd/kiln/internal/cmdutil"
	"github.com/kiln-build/kiln/fatbin"
	"github.com/kiln-build/kiln/internal/bytesize"
	"github.com/kiln-build/kiln/slim"
)

// FatbinOptions are kiln fatbin prune's inputs.
type FatbinOptions struct {
	IO          *cmdutil.IO
	Paths       []string
	GPUs        []string
	KeepPTX     bool
	PruneNVIDIA bool
	DryRun      bool
	JSON        bool
}

// NewCmdFatbin is kiln fatbin, the parent of kiln fatbin prune.
func NewCmdFatbin(f *cmdutil.Factory) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "fatbin",
		Short: "Prune the GPU code in shared libraries on disk to a fleet",
	}
	cmd.AddCommand(NewCmdFatbinPrune(f, nil))
	return cmd
}

// NewCmdFatbinPrune is kiln fatbin prune PATH... --gpus GPUS.
// runF, when not nil, gets the parsed options instead of the
// command running (tests stop there).
func NewCmdFatbinPrune(f *cmdutil.Factory, runF func(*FatbinOptions) error) *cobra.Command {
	opts := &FatbinOptions{IO: f.IO}
	prune := &cobra.Command{
		Use:   "prune PATH... --gpus h100[,l4]",
		Short: "Rewrite shared libraries in place with only the GPU code a fleet runs",
		Long: `Walks each PATH (files or directories; symlinks are not followed) for shared
libraries with CUDA fat binaries and rewrites each in place with the code the
fleet runs: per GPU the cubin that runs on it natively, and each fat binary's
newest PTX unless --keep-ptx=false. A library keeps its size and every
offset (dropped code becomes zeros) and is replaced atomically (a temporary
file .kiln-prune.* beside it, renamed over it; mode with setuid/setgid,
owner, extended attributes and times kept). A library replaced or written
while it is pruned (a pip install) is left as it is, with a warning; a
killed prune's temporary file is removed by the next one. The same
selection as kiln slim --gpus; kiln build runs it in the step that installs
the wheels, for the recipe's gpus.

NVIDIA's redistributable libraries (cuBLAS, cuDNN, NCCL, ...) are only read
and reported unless --prune-nvidia-libs: whether their license allows
modified copies is your call.`,
		Example: `  kiln fatbin prune /usr/local/lib/python3.12/dist-packages --gpus h100 --dry-run
  kiln fatbin prune ./venv/lib --gpus h100,l4 --keep-ptx=false --json`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Paths = args
			return cmdutil.Run(cmd.Context(), opts, runF, runFatbinPrune)
		},
	}
	fl := prune.Flags()
	fl.StringSliceVar(&opts.GPUs, "gpus", nil, "the fleet: GPU names such as h100,l4 or architectures such as sm_90 (required)")
	fl.BoolVar(&opts.KeepPTX, "keep-ptx", true, "keep each fat binary's newest PTX, so GPUs newer than the fleet start through JIT")
	fl.BoolVar(&opts.PruneNVIDIA, "prune-nvidia-libs", false, "prune NVIDIA's redistributable libraries too (check that their license allows modified copies)")
	fl.BoolVar(&opts.DryRun, "dry-run", false, "report what would be pruned without writing")
	fl.BoolVar(&opts.JSON, "json", false, "print the report as JSON (one object, also on failure)")
	return cmdutil.SetSchema(prune, "kiln.fatbin/v1")
}

func runFatbinPrune(ctx context.Context, opts *FatbinOptions) error {
	rep, err := fatbinPrune(ctx, opts)
	if opts.JSON {
		out := struct {
			*slim.GPUCodeReport
			DryRun bool   `json:"dry_run"`
			Error  string `json:"error,omitempty"`
		}{GPUCodeReport: rep, DryRun: opts.DryRun}
		if out.GPUCodeReport == nil {
			out.GPUCodeReport = &slim.GPUCodeReport{}
		}
		if err != nil {
			out.Error = err.Error()
		}
		if werr := cmdutil.WriteJSON(opts.IO.Out, out); werr != nil && err == nil {
			err = werr
		}
		return err
	}
	if rep != nil {
		if opts.DryRun {
			fmt.Fprintln(opts.IO.Out, "dry run: nothing written")
		}
		rep.WriteTable(opts.IO.Out, cmdutil.TableOptions(opts.IO.Out)...)
	}
	return err
}

func fatbinPrune(ctx context.Context, opts *FatbinOptions) (*slim.GPUCodeReport, error) {
	if len(opts.GPUs) == 0 {
		return nil, cmdutil.UsageErr("--gpus is required (e.g. --gpus h100)")
	}
	fleet, err := slim.ParseFleet(opts.GPUs)
	if err != nil {
		return nil, cmdutil.UsageErr("--gpus: %v", err)
	}
	rep := slim.NewGPUCodeReport(fleet, opts.KeepPTX, opts.PruneNVIDIA)
	// Libraries that changed under the prune are left as they are and
	// named; the command then fails: its job is not done.
	var changed []string
	for _, root := range opts.Paths {
		err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if d.Type().IsRegular() && fatbin.IsPruneTemp(p) {
				removeStaleTemp(opts.IO.ErrOut, p, d)
				return nil
			}
			if !d.Type().IsRegular() || !fatbin.IsSharedObject(p) || !isELFFile(p) {
				return nil
			}
			abs, err := filepath.Abs(p)
			if err != nil {
				return err
			}
			apply := opts.PruneNVIDIA || !slim.IsNVIDIALib(strings.TrimPrefix(abs, "/"))
			plan, err := pruneFile(p, fleet, opts.KeepPTX, opts.DryRun || !apply)
			if errors.Is(err, fatbin.ErrChanged) {
				cmdutil.Notef(opts.IO.ErrOut, "%v", err)
				changed = append(changed, p)
				return nil
			}
			if err != nil {
				return err
			}
			if plan.Containers == 0 {
				return nil
			}
			fi, err := d.Info()
			if err != nil {
				return err
			}
			rep.Add(abs, fi.Size(), plan, apply)
			return nil
		})
		if err != nil {
			rep.Sort()
			return rep, err
		}
	}
	rep.Sort()
	if len(changed) > 0 {
		return rep, fmt.Errorf("%d librar%s changed while being pruned and %s left unpruned (%s%s): run kiln fatbin prune again once nothing else writes there",
			len(changed), plural(len(changed), "y", "ies"), plural(len(changed), "was", "were"), changed[0], more(len(changed)))
	}
	return rep, nil
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

func more(n int) string {
	if n <= 1 {
		return ""
	}
	return fmt.Sprintf(" and %d more", n-1)
}

// staleTemp is how long a prune's temporary file goes unwritten before a
// later prune takes it for a killed run's and removes it (a younger one
// may be a prune running now, and is only passed over).
const staleTemp = 10 * time.Minute

// removeStaleTemp removes the temporary file a killed prune left (it is
// never taken for a library), saying so.
func removeStaleTemp(w io.Writer, p string, d fs.DirEntry) {
	fi, err := d.Info()
	if err != nil || time.Since(fi.ModTime()) < staleTemp {
		return
	}
	if err := os.Remove(p); err != nil {
		cmdutil.Notef(w, "%s: a killed prune's temporary file; could not remove it: %v", p, err)
		return
	}
	cmdutil.Notef(w, "removed %s, a killed prune's temporary file (%s)", p, bytesize.Format(fi.Size()))
}

func isELFFile(p string) bool {
	f, err := os.Open(p)
	if err != nil {
		return false
	}
	defer f.Close()
	b := make([]byte, 4)
	n, _ := f.Read(b)
	return n == 4 && string(b) == "\x7fELF"
}

// pruneFile is fatbin.PruneFile (a test makes a library change under it).
var pruneFile = fatbin.PruneFile
