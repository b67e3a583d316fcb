package cmdutil

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/kiln-build/kiln/cmd/kiln/internal/termtest"
	"github.com/kiln-build/kiln/internal/termtable"
	"github.com/kiln-build/kiln/internal/testkit"
)

// kiln's error line, on a terminal, wraps at its width under the message
// (it was one line the terminal broke mid-word); to a pipe it stays one
// line, whole for grep and logs.
func TestErrorLineFitsTheTerminal(t *testing.T) {
	const msg = "open kiln.yaml: no such file or directory (write one with: kiln recipes init NAME)"
	root := func() *cobra.Command {
		return &cobra.Command{Use: "kiln", SilenceErrors: true, SilenceUsage: true,
			RunE: func(*cobra.Command, []string) error { return errors.New(msg) }}
	}
	tty, out, _ := termtest.OpenTerm(t, 60)
	if code := Execute(context.Background(), root(), nil, &IO{In: strings.NewReader(""), Out: &bytes.Buffer{}, ErrOut: tty}); code != ExitFailure {
		t.Errorf("code %d", code)
	}
	screen := termtest.Screen(termtest.Plain(out()), 60)
	if len(screen) < 2 {
		t.Errorf("not wrapped: %q", screen)
	}
	for i, l := range screen {
		if termtable.Len(l) > 59 || (i == 0) != strings.HasPrefix(l, "kiln: ") || (i > 0 && !strings.HasPrefix(l, "      ")) {
			t.Errorf("row %d: %q", i, l)
		}
	}
	if got := testkit.Flat(strings.Join(screen, "\n")); got != "kiln: "+msg {
		t.Errorf("the terminal shows %q", got)
	}
	var pipe bytes.Buffer
	Execute(context.Background(), root(), nil, &IO{In: strings.NewReader(""), Out: &bytes.Buffer{}, ErrOut: &pipe})
	if pipe.String() != "kiln: "+msg+"\n" {
		t.Errorf("to a pipe: %q", pipe.String())
	}
}
