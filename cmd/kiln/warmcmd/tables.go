package warmcmd

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/kiln-build/kiln/cmd/kiln/internal/cmdutil"
	"github.com/kiln-build/kiln/internal/bytesize"
	"github.com/kiln-build/kiln/sign"
	"github.com/kiln-build/kiln/warm"
)

func writeWeightsTable(w io.Writer, wreps []*warm.WeightsReport) {
	if len(wreps) == 0 {
		return
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "WEIGHTS\tDIR\tFILES\tSIZE\tSTATE\tFETCHED\tMISSING\n")
	for _, r := range wreps {
		n := map[string]int{}
		for _, f := range r.Files {
			n[f.State]++
		}
		var parts []string
		for _, s := range []string{warm.StatePresent, warm.StateFetched, warm.StateMissing, warm.StateFailed} {
			if n[s] > 0 {
				parts = append(parts, fmt.Sprintf("%d %s", n[s], s))
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Ref, r.Dir, strings.Join(parts, ", "), bytesize.Format(r.Bytes), r.State, bytesize.Format(r.FetchedBytes), bytesize.Format(r.MissingBytes))
	}
	tw.Flush()
}

// writeSignatures prints the --verify-key outcome under warm's tables.
func writeSignatures(w io.Writer, rs []*sign.Result) {
	for _, r := range rs {
		if r.Verified {
			fmt.Fprintf(w, "signature: %s (%s): verified, %s, key %s\n", r.Ref, cmdutil.Short(r.Digest), r.Format, r.KeyID)
		} else {
			fmt.Fprintf(w, "signature: %s (%s): REFUSED, %s: %s\n", r.Ref, cmdutil.Short(r.Digest), r.Reason, r.Detail)
		}
	}
}
