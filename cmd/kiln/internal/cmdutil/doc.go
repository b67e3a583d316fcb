// Package cmdutil is what kiln's verb packages share, and nothing else:
// the I/O streams and the Factory a verb is built from, the stable exit
// codes and the errors that carry them, the root command that wires
// verbs (one place, no init hooks), progress (mpb bars on a terminal,
// lines elsewhere: Progress, ProgressMode), the terminal's width and
// whether to colour (TableOptions for internal/termtable), and the flags more
// than one verb takes (--platform/--insecure-registry, --progress,
// --compression, recipe overrides, --sign-key).
//
// Invariants:
//   - A verb package (cmd/kiln/<verb>cmd) imports cmdutil and kiln's
//     capability packages, never another verb package: a workflow two
//     verbs need lives in its capability package.
//   - Exit codes are part of kiln's interface: 0 ok, 1 failure, 2 usage,
//     3 a --ci rule broken, 4 a signature did not verify. Execute maps an
//     error to one of them, and redacts credentials from what it prints
//     whichever package formed the error.
//   - Progress goes to ErrOut, data (tables, JSON) to Out.
package cmdutil
