package cmdutil

import (
	"encoding/json"
	"io"
	"strings"
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
func Short(dg string) string {
	if i := strings.Index(dg, ":"); i >= 0 && len(dg) > i+13 {
		return dg[:i+13]
	}
	return dg
}
