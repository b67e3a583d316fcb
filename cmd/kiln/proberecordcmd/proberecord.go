package proberecordcmd

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/kiln-build/kiln/cmd/kiln/internal/cmdutil"
	"github.com/kiln-build/kiln/slim"
)

// NewCmdProbeRecord is what kiln slim --format estargz runs inside the
// probe container (from the kiln-tools mount): the probe under fanotify,
// writing the files it opened. Hidden: it is a part of kiln slim, not a
// verb of its own.
func NewCmdProbeRecord(f *cmdutil.Factory) *cobra.Command {
	ios := f.IO
	var out, user string
	cmd := &cobra.Command{
		Use:    "probe-record --out FILE [--user USER] -- CMD [ARG...]",
		Short:  "Run CMD and record the files it opens on the root mount (inside kiln slim's probe)",
		Hidden: true,
		Args:   cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if out == "" {
				return cmdutil.UsageErr("--out is required")
			}
			code, err := slim.RecordOpens(cmd.Context(), out, user, args, ios.In, ios.Out, ios.ErrOut)
			if err != nil {
				return err
			}
			if code != 0 {
				return cmdutil.Exit(code, fmt.Errorf("probe exited with status %d", code))
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&out, "out", "", "file to write the opened paths to, one a line")
	cmd.Flags().StringVar(&user, "user", "", "run CMD as this user (name or uid[:group]), as the image's USER")
	return cmd
}
