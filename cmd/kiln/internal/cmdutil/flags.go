package cmdutil

import (
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
	a := fs.Lookup(old)
	a.NoOptDefVal = f.NoOptDefVal
	// Hidden with kiln's own note, not pflag's MarkDeprecated: cobra
	// prints pflag's note through OutOrStderr, the command's stdout,
	// where it broke --json's one object.
	a.Hidden = true
	a.Annotations = map[string][]string{aliasAnnotation: {"use --" + name}}
}

const aliasAnnotation = "kiln.alias"

// AliasNote is the note of a flag Alias registered ("use --name"), or
// "" for any other flag.
func AliasNote(f *pflag.Flag) string {
	if n := f.Annotations[aliasAnnotation]; len(n) > 0 {
		return n[0]
	}
	return ""
}

// warnAliases prints a note for each deprecated alias c's command line
// used (Alias keeps pflag from printing one of its own).
func warnAliases(c *cobra.Command) {
	c.Flags().Visit(func(f *pflag.Flag) {
		if note := AliasNote(f); note != "" {
			Notef(c.ErrOrStderr(), "--%s is deprecated, %s", f.Name, note)
		}
	})
}
