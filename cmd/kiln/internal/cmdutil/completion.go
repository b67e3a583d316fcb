package cmdutil

import (
	"regexp"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/kiln-build/kiln/cuda"
	"github.com/kiln-build/kiln/recipes"
)

// flagCompletions completes flags by name, the same way in every verb
// that has them (kiln completion bash|zsh|fish|powershell).
var flagCompletions = map[string]cobra.CompletionFunc{
	"progress":    listedWords,
	"compression": listedWords,
	"gpu":         CompleteGPUs,
	"gpus":        CompleteGPUs,
}

// CompleteFlags gives every flag of cmd and its subcommands that by names
// its completion (flags completed already, by their verb or an earlier
// call, keep theirs). NewRoot gives flagCompletions'; verbkit adds the
// ones whose words come from the packages it wires (slim's policies,
// warm's targets).
func CompleteFlags(cmd *cobra.Command, by map[string]cobra.CompletionFunc) {
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		fn, ok := by[f.Name]
		if !ok {
			return
		}
		if _, has := cmd.GetFlagCompletionFunc(f.Name); has {
			return
		}
		_ = cmd.RegisterFlagCompletionFunc(f.Name, func(c *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
			return fn(c, []string{f.Usage}, toComplete)
		})
	})
	for _, c := range cmd.Commands() {
		CompleteFlags(c, by)
	}
}

var parenRe = regexp.MustCompile(`\([^)]*\)`)

// listedWords completes the words a flag's help lists, after its colon
// when it has one ("progress on stderr: auto, tty, plain, none"; words of
// more than one word, such as "target compression", are not choices and
// are left out): each verb's help says
// what that verb accepts, so the completion cannot offer another verb's
// words. args[0] is the help text.
func listedWords(_ *cobra.Command, args []string, _ string) ([]cobra.Completion, cobra.ShellCompDirective) {
	list := parenRe.ReplaceAllString(args[0], "")
	if _, after, ok := strings.Cut(list, ": "); ok {
		list = after
	}
	var out []cobra.Completion
	for _, w := range strings.Split(list, ",") {
		w = strings.TrimPrefix(strings.TrimSpace(w), "or ")
		if w = strings.TrimSpace(w); w != "" && !strings.ContainsAny(w, " .") && !slices.Contains(out, w) {
			out = append(out, w)
		}
	}
	return out, cobra.ShellCompDirectiveNoFileComp
}

// CompleteGPUs completes GPU names (h100, l4, rtx4090, ...) from kiln's GPU
// table, each with its full name and compute capability, and sm_XX
// architectures.
func CompleteGPUs(_ *cobra.Command, _ []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
	db, err := cuda.Data()
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	// A comma-separated list (--gpus h100,l4) completes its last name.
	prefix := ""
	if i := strings.LastIndex(toComplete, ","); i >= 0 {
		prefix = toComplete[:i+1]
	}
	var out []cobra.Completion
	seen := map[string]bool{}
	add := func(name, desc string) {
		if !seen[name] {
			seen[name] = true
			out = append(out, cobra.CompletionWithDesc(prefix+name, desc))
		}
	}
	for _, g := range db.GPUs.GPUs {
		desc := g.Name + " (" + cuda.SM(g.ComputeCapability) + ")"
		for _, a := range g.Aliases {
			if !strings.Contains(a, "-") {
				add(a, desc)
			}
		}
	}
	for _, a := range db.GPUs.Arch {
		add(a.Arch, "architecture")
	}
	return out, cobra.ShellCompDirectiveNoFileComp
}

// CompleteRecipes completes the first argument with the catalog's recipe
// names and descriptions (recipes show, recipes init).
func CompleteRecipes(_ *cobra.Command, args []string, _ string) ([]cobra.Completion, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	cat, err := recipes.Catalog()
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	out := make([]cobra.Completion, 0, len(cat))
	for _, e := range cat {
		out = append(out, cobra.CompletionWithDesc(e.Name, e.Description))
	}
	return out, cobra.ShellCompDirectiveNoFileComp
}
