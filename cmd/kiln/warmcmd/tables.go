package warmcmd

import (
	"fmt"
	"io"
	"strings"

	"github.com/kiln-build/kiln/cmd/kiln/internal/cmdutil"
	"github.com/kiln-build/kiln/internal/bytesize"
	"github.com/kiln-build/kiln/internal/termtable"
	"github.com/kiln-build/kiln/sign"
	"github.com/kiln-build/kiln/warm"
)

func writeWeightsTable(w io.Writer, wreps []*warm.WeightsReport) {
	if len(wreps) == 0 {
		return
	}
	fmt.Fprintln(w)
	o := termtable.Resolve(cmdutil.TableOptions(w)...)
	t := termtable.New(o, termtable.Column{Head: "WEIGHTS", Shrink: true, Min: 12}, termtable.Column{Head: "DIR", Shrink: true, Min: 10},
		termtable.Column{Head: "FILES", Wrap: true, Min: 10}, termtable.Column{Head: "SIZE", Right: true}, termtable.Column{Head: "STATE"},
		termtable.Column{Head: "FETCHED", Right: true}, termtable.Column{Head: "MISSING", Right: true})
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
		t.Row(r.Ref, r.Dir, strings.Join(parts, ", "), bytesize.Format(r.Bytes), r.State, bytesize.Format(r.FetchedBytes), bytesize.Format(r.MissingBytes))
	}
	t.Style(func(row, col int, s string) string {
		if col == 4 && row >= 0 {
			return termtable.Paint(true, stateColor[wreps[row].State], s)
		}
		return s
	})
	t.Write(w)
}

// writeSignatures prints the --verify-key outcome under warm's tables.
// On a terminal verified is green and REFUSED red.
func writeSignatures(w io.Writer, rs []*sign.Result) {
	color := cmdutil.ColorEnabled(w)
	for _, r := range rs {
		if r.Verified {
			fmt.Fprintf(w, "signature: %s (%s): %s, %s, key %s\n", r.Ref, cmdutil.Short(r.Digest), termtable.Paint(color, termtable.Green, "verified"), r.Format, r.KeyID)
		} else {
			fmt.Fprintf(w, "signature: %s (%s): %s, %s: %s\n", r.Ref, cmdutil.Short(r.Digest), termtable.Paint(color, termtable.Red, "REFUSED"), r.Reason, r.Detail)
		}
	}
}
