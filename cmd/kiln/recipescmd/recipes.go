package recipescmd

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/kiln-build/kiln/cmd/kiln/internal/cmdutil"
	"github.com/kiln-build/kiln/internal/termtable"
	"github.com/kiln-build/kiln/recipes"
)

// RecipesOptions are kiln recipes' inputs.
type RecipesOptions struct {
	IO     *cmdutil.IO
	Name   string
	JSON   bool
	Output string
	Force  bool
}

// NewCmdRecipes is kiln recipes, the parent of list, show and init.
func NewCmdRecipes(f *cmdutil.Factory) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "recipes",
		Short: "The curated recipe catalog: list, show, init",
		Example: `  kiln recipes list
  kiln recipes show torch25-cu124
  kiln recipes init torch27-cu128-blackwell`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return cmdutil.UsageErr("recipes needs a subcommand: list, show or init")
		},
	}
	cmd.AddCommand(NewCmdRecipesList(f, nil), NewCmdRecipesShow(f, nil), NewCmdRecipesInit(f, nil))
	return cmd
}

// NewCmdRecipesList is kiln recipes list. runF, when not nil, gets the
// parsed options instead of the command running (tests stop there).
func NewCmdRecipesList(f *cmdutil.Factory, runF func(*RecipesOptions) error) *cobra.Command {
	opts := &RecipesOptions{IO: f.IO}
	cmd := &cobra.Command{
		Use:     "list",
		Short:   "List the curated recipes",
		Example: "  kiln recipes list\n  kiln recipes list --json",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return cmdutil.Run(cmd.Context(), opts, runF, runRecipesList)
		},
	}
	cmd.Flags().BoolVar(&opts.JSON, "json", false, "print the list as JSON")
	return cmdutil.SetSchema(cmd, "kiln.recipes-list/v1")
}

// NewCmdRecipesShow is kiln recipes show NAME. runF, when not nil, gets
// the parsed options instead of the command running (tests stop there).
func NewCmdRecipesShow(f *cmdutil.Factory, runF func(*RecipesOptions) error) *cobra.Command {
	opts := &RecipesOptions{IO: f.IO}
	return &cobra.Command{
		Use:               "show NAME",
		Short:             "Print a curated recipe's kiln.yaml",
		Example:           "  kiln recipes show torch25-cu124",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: cmdutil.CompleteRecipes,
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Name = args[0]
			return cmdutil.Run(cmd.Context(), opts, runF, runRecipesShow)
		},
	}
}

// NewCmdRecipesInit is kiln recipes init [NAME]. runF, when not nil, gets
// the parsed options instead of the command running (tests stop there).
func NewCmdRecipesInit(f *cmdutil.Factory, runF func(*RecipesOptions) error) *cobra.Command {
	opts := &RecipesOptions{IO: f.IO}
	cmd := &cobra.Command{
		Use:   "init [NAME]",
		Short: "Write a curated recipe to kiln.yaml (default: " + recipes.DefaultRecipe + ")",
		Example: `  kiln recipes init                   # the default stack, ` + recipes.DefaultRecipe + `
  kiln recipes init torch25-cu124
  kiln recipes init cuda13-torch29 -o serve/kiln.yaml --force`,
		Args:              cobra.MaximumNArgs(1),
		ValidArgsFunction: cmdutil.CompleteRecipes,
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Name = recipes.DefaultRecipe
			if len(args) == 1 {
				opts.Name = args[0]
			}
			return cmdutil.Run(cmd.Context(), opts, runF, runRecipesInit)
		},
	}
	cmd.Flags().StringVarP(&opts.Output, "output", "o", "kiln.yaml", "file to write")
	cmd.Flags().BoolVar(&opts.Force, "force", false, "overwrite an existing file")
	return cmd
}

func runRecipesList(_ context.Context, opts *RecipesOptions) error {
	all, err := recipes.Catalog()
	if err != nil {
		return err
	}
	if opts.JSON {
		return cmdutil.WriteJSON(opts.IO.Out, map[string]any{"recipes": all})
	}
	// Descriptions are cut at the terminal's edge; --json and
	// `kiln recipes show NAME` give them whole.
	t := termtable.New(termtable.Resolve(cmdutil.TableOptions(opts.IO.Out)...),
		termtable.Column{Head: "NAME"}, termtable.Column{Head: "DESCRIPTION", Shrink: true, ShrinkEnd: true, Min: 20})
	for _, e := range all {
		d := e.Description
		if e.Name == recipes.DefaultRecipe {
			d = "(default) " + d
		}
		t.Row(e.Name, d)
	}
	return t.Write(opts.IO.Out)
}

func runRecipesShow(_ context.Context, opts *RecipesOptions) error {
	b, err := recipes.CatalogRecipe(opts.Name)
	if err != nil {
		return cmdutil.UsageErr("%v", err)
	}
	_, err = opts.IO.Out.Write(b)
	return err
}

func runRecipesInit(_ context.Context, opts *RecipesOptions) error {
	b, err := recipes.CatalogRecipe(opts.Name)
	if err != nil {
		return cmdutil.UsageErr("%v", err)
	}
	out := opts.Output
	if out == "" {
		out = "kiln.yaml"
	}
	flags := os.O_WRONLY | os.O_CREATE | os.O_EXCL
	if opts.Force {
		flags = os.O_WRONLY | os.O_CREATE | os.O_TRUNC
	}
	if dir := filepath.Dir(out); dir != "." {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	f, err := os.OpenFile(out, flags, 0o644)
	if errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("%s exists; pass --force to overwrite it", out)
	}
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	fmt.Fprintf(opts.IO.Out, "wrote %s (recipe %s); next: kiln resolve %s\n", out, opts.Name, out)
	return nil
}
