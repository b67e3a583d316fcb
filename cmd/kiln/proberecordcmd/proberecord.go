package proberecordcmd

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/kiln-build/kiln/cmd/kiln/internal/cmdutil"
	"github.com/kiln-build/kiln/slim"
)

// ProbeRecordOptions are kiln probe-record's inputs.
type ProbeRecordOptions struct {
	IO *cmdutil.IO
	// Out is --out, the file the opened paths are written to.
	Out string
	// User is --user, whom CMD runs as.
	User string
	// Cmd is CMD [ARG...].
	Cmd []string
}

// NewCmdProbeRecord is what kiln slim --format estargz runs inside the
// probe container (from the kiln-tools mount): the probe under fanotify,
// writing the files it opened. Hidden: it is a part of kiln slim, not a
// verb of its own. runF, when not nil, gets the parsed options instead of
// the command running (tests stop there).
func NewCmdProbeRecord(f *cmdutil.Factory, runF func(*ProbeRecordOptions) error) *cobra.Command {
	opts := &ProbeRecordOptions{IO: f.IO}
	cmd := &cobra.Command{
		Use:    "probe-record --out FILE [--user USER] -- CMD [ARG...]",
		Short:  "Run CMD and record the files it opens on the root mount (inside kiln slim's probe)",
		Hidden: true,
		Args:   cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if opts.Out == "" {
				return cmdutil.UsageErr("--out is required")
			}
			opts.Cmd = args
			return cmdutil.Run(cmd.Context(), opts, runF, runProbeRecord)
		},
	}
	cmd.Flags().StringVar(&opts.Out, "out", "", "file to write the opened paths to, one a line")
	cmd.Flags().StringVar(&opts.User, "user", "", "run CMD as this user (name or uid[:group]), as the image's USER")
	return cmd
}

func runProbeRecord(ctx context.Context, opts *ProbeRecordOptions) error {
	ios := opts.IO
	code, err := slim.RecordOpens(ctx, opts.Out, opts.User, opts.Cmd, ios.In, ios.Out, ios.ErrOut)
	if err != nil {
		return err
	}
	if code != 0 {
		return cmdutil.Exit(code, fmt.Errorf("probe exited with status %d", code))
	}
	return nil
}
