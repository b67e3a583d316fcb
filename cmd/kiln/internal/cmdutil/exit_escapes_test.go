package cmdutil

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// An error that quotes a registry's error body or an artifact's text
// carries what a hostile source put there; the line kiln prints keeps the
// words and drops the terminal escapes (issue 27).
func TestExecuteStripsTerminalEscapes(t *testing.T) {
	root := &cobra.Command{Use: "kiln", SilenceErrors: true, SilenceUsage: true,
		RunE: func(*cobra.Command, []string) error {
			return errors.New("GET blob: 500 \x1b]0;pwned\x07\x1b[2Jstorage \x9bsays no\r")
		}}
	var out, errOut bytes.Buffer
	code := Execute(context.Background(), root, nil, &IO{In: strings.NewReader(""), Out: &out, ErrOut: &errOut})
	if code != ExitFailure {
		t.Errorf("code %d", code)
	}
	got := errOut.String()
	if !strings.Contains(got, "storage") || !strings.Contains(got, "says no") {
		t.Errorf("stderr %q lost the message", got)
	}
	if strings.ContainsAny(got, "\x1b\x07\r") || strings.Contains(got, "\x9b") {
		t.Errorf("stderr %q carries terminal control characters", got)
	}
}
