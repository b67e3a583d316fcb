package cmdutil

import (
	"fmt"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// kiln's flag vocabulary, the same in every verb (a test walks every
// command's flags and holds them to it):
//
//	--progress        auto, tty, plain, none (ProgressFlag)
//	-j, --jobs N      transfers or layers worked on at once
//	--work-dir DIR    scratch directory
//	--to IMAGE        where an image goes (registry, oci:DIR, docker-archive:FILE)
//	-o, --output FILE a file kiln writes
//
// Older spellings stay as hidden aliases (Alias) that say what to write.

// Alias registers old as a hidden, deprecated spelling of fs's flag
// name: both set the same value, and using old prints "kiln: --old is
// deprecated, use --name" on stderr (the root's PersistentPreRun).
func Alias(fs *pflag.FlagSet, old, name string) {
	f := fs.Lookup(name)
	if f == nil {
		panic("cmdutil.Alias: no flag --" + name)
	}
	fs.Var(f.Value, old, f.Usage)
	fs.Lookup(old).NoOptDefVal = f.NoOptDefVal
	_ = fs.MarkDeprecated(old, "use --"+name)
}

// warnAliases prints a note for each deprecated alias c's command line
// used (pflag leaves its own note in a buffer cobra prints only on errors).
func warnAliases(c *cobra.Command) {
	c.Flags().Visit(func(f *pflag.Flag) {
		if f.Deprecated != "" {
			fmt.Fprintf(c.ErrOrStderr(), "kiln: --%s is deprecated, %s\n", f.Name, f.Deprecated)
		}
	})
}
