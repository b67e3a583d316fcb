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
	t.Write(w)
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
