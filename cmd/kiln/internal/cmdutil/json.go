package cmdutil

import (
	"encoding/json"
	"io"

	"github.com/kiln-build/kiln/internal/termtable"
)

// WriteJSON writes v as kiln's --json output: indented, HTML left as is.
func WriteJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// NonNil makes a nil list an empty one, so JSON says [] and not null.
func NonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// Short abbreviates a digest for tables (sha256: and 12 hex digits).
func Short(dg string) string { return termtable.Digest(dg) }
