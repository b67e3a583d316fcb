package cmdutil

import (
	"fmt"
	"io"
	"regexp"
	"strings"

	"github.com/spf13/cobra"

	"github.com/kiln-build/kiln/internal/shellword"
	"github.com/kiln-build/kiln/internal/termtable"
)

// Help and usage are cobra's (the same sections, in the same order: its
// defaultHelpFunc and defaultUsageFunc), drawn to the width of the
// terminal they go to (80 columns on a pipe): a line of the description
// too wide for it is wrapped under its own indentation, an example's
// command is continued with " \" outside its quotes so that it still
// pastes, a command's summary hangs under itself, and each flag's usage
// hangs under the usage column (wrapFlags). Text is never cut. kiln has
// no command groups and no help-only topics, so neither section is drawn.

// setHelp makes root and every command under it draw its help this way.
func setHelp(root *cobra.Command) {
	root.SetHelpFunc(func(c *cobra.Command, _ []string) {
		w := c.OutOrStdout()
		writeHelp(w, c, TermWidth(w))
	})
	root.SetUsageFunc(func(c *cobra.Command) error {
		w := c.OutOrStderr()
		writeUsage(w, c, TermWidth(w))
		return nil
	})
}

func writeHelp(w io.Writer, c *cobra.Command, width int) {
	text := c.Long
	if text == "" {
		text = c.Short
	}
	if text = strings.TrimRight(text, " \t\n"); text != "" {
		fmt.Fprintln(w, wrapProse(text, width))
		fmt.Fprintln(w)
	}
	if c.Runnable() || c.HasSubCommands() {
		writeUsage(w, c, width)
	}
}

func writeUsage(w io.Writer, c *cobra.Command, width int) {
	fmt.Fprint(w, "Usage:")
	if c.Runnable() {
		fmt.Fprintf(w, "\n%s", wrapProse("  "+c.UseLine(), width))
	}
	if c.HasAvailableSubCommands() {
		fmt.Fprintf(w, "\n  %s [command]", c.CommandPath())
	}
	if len(c.Aliases) > 0 {
		fmt.Fprintf(w, "\n\nAliases:\n  %s", c.NameAndAliases())
	}
	if c.HasExample() {
		fmt.Fprintf(w, "\n\nExamples:\n%s", wrapExample(strings.TrimRight(c.Example, " \t\n"), width))
	}
	if c.HasAvailableSubCommands() {
		fmt.Fprint(w, "\n\nAvailable Commands:")
		for _, sub := range c.Commands() {
			if sub.IsAvailableCommand() || sub.Name() == "help" {
				name := fmt.Sprintf("  %-*s ", sub.NamePadding(), sub.Name())
				fmt.Fprintf(w, "\n%s", strings.Join(termtable.Hang(width, name, "", sub.Short), "\n"))
			}
		}
	}
	if c.HasAvailableLocalFlags() {
		fmt.Fprintf(w, "\n\nFlags:\n%s", wrapFlags(c.LocalFlags().FlagUsages(), width))
	}
	if c.HasAvailableInheritedFlags() {
		fmt.Fprintf(w, "\n\nGlobal Flags:\n%s", wrapFlags(c.InheritedFlags().FlagUsages(), width))
	}
	if c.HasAvailableSubCommands() {
		fmt.Fprintf(w, "\n\nUse \"%s [command] --help\" for more information about a command.", c.CommandPath())
	}
	fmt.Fprintln(w)
}

// termLine is a line of a two-column list ("  0    ok", "  oci:DIR
// an OCI image layout"): its continuation starts under the second
// column. listItem is a bullet or a number.
var (
	termLine = regexp.MustCompile(`^\s*\S+(?: \S+)*? {2,}`)
	listItem = regexp.MustCompile(`^\s*(?:[-*]|\d+[.)]) `)
)

// wrapProse wraps each line of s wider than width under its own
// indentation: a list item's continuation under its text, a two-column
// line's under its second column. Lines that fit are left as written.
func wrapProse(s string, width int) string { return wrapLines(s, width, width/2) }

// wrapFlags wraps pflag's flag list (FlagUsages: the usages one column
// in, a usage's own lines under it) with each usage's continuation under
// the usage column. pflag's own FlagUsagesWrapped gives up on a line
// whose next word is wider than the room left (a path, a URL) and
// prints the rest of the usage on it whole.
func wrapFlags(s string, width int) string {
	return wrapLines(strings.TrimRight(s, " \t\n"), width, width-24)
}

// wrapLines is wrapProse with a two-column line's second column hung
// under only when it starts before maxHang.
func wrapLines(s string, width, maxHang int) string {
	var out []string
	for _, line := range strings.Split(s, "\n") {
		if termtable.Len(line) <= width || strings.HasPrefix(line, "\t") { // fits, or a command (cobra's completion help)
			out = append(out, line)
			continue
		}
		under := len(line) - len(strings.TrimLeft(line, " "))
		if m := listItem.FindString(line); m != "" {
			under = len(m)
		} else if m := termLine.FindString(line); m != "" && len(m) < maxHang {
			under = len(m)
		}
		out = append(out, termtable.Hang(width, line[:under], "", line[under:])...)
	}
	return strings.Join(out, "\n")
}

// wrapExample wraps an example's lines wider than width: a comment as a
// comment, a command as a shell command continued with " \" between
// words outside quotes, each continuation four columns in.
func wrapExample(s string, width int) string {
	var out []string
	for _, line := range strings.Split(s, "\n") {
		if termtable.Len(line) <= width {
			out = append(out, line)
			continue
		}
		ind := line[:len(line)-len(strings.TrimLeft(line, " "))]
		body := line[len(ind):]
		if strings.HasPrefix(body, "#") {
			for _, l := range termtable.Wrap(strings.TrimSpace(strings.TrimPrefix(body, "#")), width-len(ind)-2, "") {
				out = append(out, ind+"# "+l)
			}
			continue
		}
		cont := ind + "    "
		cur := ind
		words := flagWords(shellword.Words(body))
		for i, word := range words {
			last := i == len(words)-1 && word == "\\" // already continued
			if i > 0 && !last && termtable.Len(cur)+1+termtable.Len(word)+2 > width {
				out = append(out, cur+" \\")
				cur = cont + word
				continue
			}
			if i > 0 {
				cur += " "
			}
			cur += word
		}
		out = append(out, cur)
	}
	return strings.Join(out, "\n")
}

// flagWords joins each flag to its value ("--target containerd"), so
// that an example's line breaks between flags, not inside one.
func flagWords(words []string) []string {
	var out []string
	for i := 0; i < len(words); i++ {
		w := words[i]
		if strings.HasPrefix(w, "-") && !strings.Contains(w, "=") && i+1 < len(words) &&
			!strings.HasPrefix(words[i+1], "-") && words[i+1] != "\\" && words[i+1] != "|" {
			w += " " + words[i+1]
			i++
		}
		out = append(out, w)
	}
	return out
}
