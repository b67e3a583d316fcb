package verbkit

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/google/go-containerregistry/pkg/name"

	"github.com/spf13/cobra"

	"github.com/kiln-build/kiln/cmd/kiln/internal/cmdutil"
	"github.com/kiln-build/kiln/recipes"
	"github.com/kiln-build/kiln/registry"
)

// RecipeFlags are shared by resolve, lock, build and compat refresh:
// overrides for the recipe's registry mirror and wheel indexes, and the
// compatibility data.
type RecipeFlags struct {
	// Mirror is --mirror, every verb's registry mirror setting
	// (MirrorOptions). Its Docker Hub mirror is also the plan's
	// registry_mirror: the nvidia/cuda bases are named through it, as
	// the recipe's registry_mirror names them (an old --mirror HOST
	// means what it meant).
	Mirror []string
	// MirrorSet says --mirror was given (an empty --mirror removes the
	// recipe's mirror, where no flag keeps it).
	MirrorSet bool
	// WheelIndexes is --wheel-index; none given, $KILN_WHEEL_INDEX
	// (comma-separated), and unset that, the recipe's wheel_indexes.
	WheelIndexes []string
	// CompatData is a refreshed data file (kiln compat refresh); "" means
	// $KILN_COMPAT_DATA, and unset that, the embedded data.
	CompatData string
	// PythonMirror replaces the relocatable Python's download prefix; ""
	// means $KILN_PYTHON_MIRROR, and unset that, the recipe's
	// python_mirror.
	PythonMirror string
}

// Register adds --mirror, --wheel-index and --compat-data to cmd; call
// Changed from the command's RunE.
func (f *RecipeFlags) Register(cmd *cobra.Command) {
	MirrorFlag(cmd.Flags(), &f.Mirror)
	cmd.Flags().Lookup("mirror").Usage += "; the Docker Hub mirror also names the plan's nvidia/cuda bases (overrides registry_mirror; \"\" removes it)"
	cmd.Flags().StringSliceVar(&f.WheelIndexes, "wheel-index", nil, "PEP 503/691 index URL for torch, flash-attn, bitsandbytes and pip extras (repeatable; default $"+recipes.WheelIndexEnv+", comma-separated; overrides wheel_indexes)")
	cmd.Flags().StringVar(&f.PythonMirror, "python-mirror", "", "URL that replaces https://github.com/astral-sh/python-build-standalone/releases/download for the Python kiln installs when the base OS ships another version (default $"+recipes.PythonMirrorEnv+"; overrides python_mirror; the archives' sha256s stay kiln's)")
	cmd.Flags().StringVar(&f.CompatData, "compat-data", "", "compatibility data file written by kiln compat refresh (default $"+recipes.DataEnv+"; unset: kiln's embedded data)")
}

// Changed records which of the flags cmd's command line set.
func (f *RecipeFlags) Changed(cmd *cobra.Command) {
	f.MirrorSet = cmd.Flags().Changed("mirror")
}

// LoadCompatData loads the data file the flag or the environment names;
// nil means the embedded data.
func (f *RecipeFlags) LoadCompatData() (*recipes.DB, error) {
	path := f.CompatData
	if path == "" {
		path = os.Getenv(recipes.DataEnv)
	}
	if path == "" {
		return nil, nil
	}
	return recipes.LoadDataFile(path)
}

// ResolverOptions are the flags as recipes.Resolve options.
func (f *RecipeFlags) ResolverOptions() ([]recipes.ResolveOption, error) {
	var o []recipes.ResolveOption
	if f.MirrorSet {
		hub, err := planMirror(f.Mirror)
		if err != nil {
			return nil, err
		}
		if hub != nil {
			o = append(o, recipes.WithMirror(*hub))
		}
	}
	if _, err := f.MirrorOptions(nil); err != nil {
		return nil, err
	}
	idx := f.WheelIndexes
	if len(idx) == 0 {
		var err error
		if idx, err = recipes.WheelIndexesFromEnv(); err != nil {
			return nil, err
		}
	}
	if len(idx) > 0 {
		o = append(o, recipes.WithWheelIndexes(idx...))
	}
	pm := f.PythonMirror
	if pm != "" {
		if err := recipes.CheckPythonMirror(pm); err != nil {
			return nil, fmt.Errorf("--python-mirror: %v", err)
		}
	} else {
		var err error
		if pm, err = recipes.PythonMirrorFromEnv(); err != nil {
			return nil, err
		}
	}
	if pm != "" {
		o = append(o, recipes.WithPythonMirror(pm))
	}
	db, err := f.LoadCompatData()
	if err != nil {
		return nil, err
	}
	if db != nil {
		o = append(o, recipes.WithData(db))
	}
	return o, nil
}

// planMirror is the plan's registry_mirror --mirror sets: "" for an
// empty --mirror (the recipe's removed), the first Docker Hub mirror, or
// nil when --mirror names none (the recipe's kept).
func planMirror(flags []string) (*string, error) {
	for _, s := range flags {
		if s == "" {
			none := ""
			return &none, nil
		}
		ms, err := registry.ParseMirrors(s, "--mirror")
		if err != nil {
			return nil, cmdutil.UsageErr("%v", err)
		}
		for _, m := range ms {
			if m.Registry == name.DefaultRegistry {
				return &m.Endpoint, nil
			}
		}
	}
	return nil, nil
}

// MirrorOptions are the registry options of --mirror, $KILN_MIRROR and
// the host's files (MirrorOptions), notes on ios's stderr (nil: none).
func (f *RecipeFlags) MirrorOptions(ios *cmdutil.IO) ([]registry.Option, error) {
	var note io.Writer
	if ios != nil {
		note = ios.ErrOut
	}
	return MirrorOptions(f.Mirror, note)
}

// RecipeFile is the recipe a command reads: f, or ./kiln.yaml.
func RecipeFile(f string) string {
	if f == "" {
		return "kiln.yaml"
	}
	return f
}

// RecipeLoadErr says how to make the recipe a command did not find.
func RecipeLoadErr(err error) error {
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("%v (write one with: kiln recipes init NAME)", err)
	}
	return err
}

// Refusal reports a resolver refusal: as JSON on stdout with --json, and
// as an error otherwise; both exit 1.
func Refusal(ios *cmdutil.IO, asJSON bool, err error) error {
	var re *recipes.ResolveError
	if !errors.As(err, &re) {
		return err
	}
	if asJSON {
		_ = cmdutil.WriteJSON(ios.Out, map[string]any{"error": re.Error(), "field": re.Field, "reason": re.Reason, "alternatives": cmdutil.NonNil(re.Alternatives)})
		cmdutil.Notef(ios.ErrOut, "refused: %s", re.Error())
		return cmdutil.SilentExit(cmdutil.ExitFailure)
	}
	cmdutil.Notef(ios.ErrOut, "refused: %s: %s", re.Field, re.Reason)
	for _, a := range re.Alternatives {
		fmt.Fprintf(ios.ErrOut, "  try: %s\n", a)
	}
	return cmdutil.SilentExit(cmdutil.ExitFailure)
}

// DataErr reports a compatibility data file that cannot be used: with
// --json as one object on stdout too, like every failure a machine reads.
func DataErr(ios *cmdutil.IO, asJSON bool, err error) error {
	return DataErrField(ios, asJSON, "compat-data", err)
}

// DataErrField is DataErr for an input named by another flag.
func DataErrField(ios *cmdutil.IO, asJSON bool, field string, err error) error {
	if asJSON {
		_ = cmdutil.WriteJSON(ios.Out, map[string]any{"error": err.Error(), "field": field})
	}
	return err
}
