package cmdutil

import (
	"bytes"
	"encoding/json"
	"io"
	"slices"
	"strconv"

	"github.com/kiln-build/kiln/internal/termtable"
	"github.com/spf13/cobra"
)

// The --json contract, kept here once for every verb: with --json a verb
// prints exactly one JSON object on stdout, on success and on failure. Its
// first keys are
//
//	"schema":    "kiln.VERB/vN" (SetSchema names it, docs/schema/ holds it)
//	"ok":        true, or false when the command failed
//	"error":     the message (failure only)
//	"exit_code": the process exit code (failure only)
//
// and then the verb's own report, whole or as far as it got. Keys are
// snake_case; strings are UTF-8 as written (no \u003e).
//
// A verb writes its report with WriteJSON as before, or nothing when it
// fails early; Execute holds stdout back while a --json verb runs and
// writes the one object when the verb returns.

// schemaAnnotation is the cobra annotation SetSchema records.
const schemaAnnotation = "kiln.schema"

// SetSchema registers cmd's --json schema name ("kiln.analyze/v1") and
// returns cmd. Every command with a --json flag has one (a test checks).
func SetSchema(cmd *cobra.Command, schema string) *cobra.Command {
	if cmd.Annotations == nil {
		cmd.Annotations = map[string]string{}
	}
	cmd.Annotations[schemaAnnotation] = schema
	return cmd
}

// Schema is the --json schema SetSchema registered for cmd ("" if none).
func Schema(cmd *cobra.Command) string { return cmd.Annotations[schemaAnnotation] }

// wantsJSON says whether args ask for --json (before a "--"): Execute
// decides to hold stdout back before cobra has parsed the flags, and a
// command line cobra refuses still gets its JSON answer.
func wantsJSON(args []string) bool {
	for _, a := range args {
		switch a {
		case "--":
			return false
		case "--json", "--json=true", "--json=1":
			return true
		}
	}
	return false
}

// jsonFlagSet says whether cmd has a --json flag that this run set (or
// that args asked for, when cobra stopped before parsing it).
func jsonFlagSet(cmd *cobra.Command, args []string) bool {
	if cmd == nil {
		return false
	}
	fl := cmd.Flags().Lookup("json")
	if fl == nil {
		return false
	}
	if fl.Changed {
		return fl.Value.String() == "true"
	}
	return wantsJSON(args)
}

// writeResult writes the one --json object: held is what the verb wrote to
// stdout (its report, or nothing), err its outcome (nil: ok).
func writeResult(w io.Writer, schema string, held []byte, errMsg string, code int) error {
	keys, vals := []string{}, map[string]json.RawMessage{}
	if report, ok := topLevel(held); ok {
		for _, k := range report.keys {
			keys = append(keys, k)
			vals[k] = report.vals[k]
		}
	} else if len(bytes.TrimSpace(held)) > 0 {
		// Not one object (a verb that printed text under --json): pass it
		// through untouched rather than lose it.
		_, err := w.Write(held)
		return err
	}
	head := []string{"schema", "ok"}
	if _, has := vals["schema"]; !has && schema != "" {
		vals["schema"] = quote(schema)
	}
	if errMsg != "" {
		vals["ok"] = json.RawMessage("false")
		if _, has := vals["error"]; !has { // a verb's own words stay
			vals["error"] = quote(errMsg)
		}
		vals["exit_code"] = json.RawMessage(strconv.Itoa(code))
		head = append(head, "error", "exit_code")
	} else if _, has := vals["ok"]; !has {
		vals["ok"] = json.RawMessage("true")
	}
	// schema_version was the old marker; "schema" replaces it.
	delete(vals, "schema_version")
	var b bytes.Buffer
	b.WriteByte('{')
	n := 0
	add := func(k string) {
		v, ok := vals[k]
		if !ok {
			return
		}
		if n > 0 {
			b.WriteByte(',')
		}
		n++
		b.Write(quote(k))
		b.WriteByte(':')
		b.Write(v)
	}
	for _, k := range head {
		add(k)
	}
	for _, k := range keys {
		if !slices.Contains(head, k) {
			add(k)
		}
	}
	b.WriteByte('}')
	var out bytes.Buffer
	if err := json.Indent(&out, unescapeHTML(b.Bytes()), "", "  "); err != nil {
		return err
	}
	out.WriteByte('\n')
	_, err := w.Write(out.Bytes())
	return err
}

type object struct {
	keys []string
	vals map[string]json.RawMessage
}

// topLevel reads held as one JSON object, keeping its keys' order.
func topLevel(held []byte) (object, bool) {
	o := object{vals: map[string]json.RawMessage{}}
	dec := json.NewDecoder(bytes.NewReader(held))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return o, false
	}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return o, false
		}
		k, _ := t.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return o, false
		}
		if _, dup := o.vals[k]; !dup {
			o.keys = append(o.keys, k)
		}
		o.vals[k] = v
	}
	if t, err := dec.Token(); err != nil || t != json.Delim('}') {
		return o, false
	}
	if _, err := dec.Token(); err != io.EOF {
		return o, false // more than one value
	}
	return o, true
}

func quote(s string) json.RawMessage {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s)
	return bytes.TrimRight(b.Bytes(), "\n")
}

// unescapeHTML turns encoding/json's \u003c, \u003e and \u0026 back into
// <, > and & (a verb that used json.Marshal): the output is UTF-8 as
// written. An escaped backslash before "u003e" stays as it is.
func unescapeHTML(b []byte) []byte {
	out := make([]byte, 0, len(b))
	for i := 0; i < len(b); i++ {
		if b[i] != '\\' || i+1 >= len(b) {
			out = append(out, b[i])
			continue
		}
		if b[i+1] == 'u' && i+6 <= len(b) {
			switch string(b[i+2 : i+6]) {
			case "003c", "003C":
				out = append(out, '<')
				i += 5
				continue
			case "003e", "003E":
				out = append(out, '>')
				i += 5
				continue
			case "0026":
				out = append(out, '&')
				i += 5
				continue
			}
		}
		out = append(out, b[i], b[i+1])
		i++
	}
	return out
}

// Warn writes a warning to ios.ErrOut, "warning: MSG", wrapped at the
// terminal's width and continued under itself: every verb's warnings look
// alike and fit the terminal.
func Warn(ios *IO, msg string) {
	termtable.Fprintw(ios.ErrOut, TermWidth(ios.ErrOut), "warning: ", "  ", msg)
}
