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
//   - Exit codes are part of kiln's interface, one meaning each (0 ok, 1
//     failure, 2 usage, 3 a --ci rule broken, 4 a signature did not
//     verify, 5 not ready, 130 interrupted; ExitCodesHelp, docs/exit-codes.md).
//     Execute maps an error to one of them and is the one place an error
//     is printed (once, redacted of credentials whichever package formed
//     it); a verb returns its error and does not print it too.
//   - --json is one contract, kept by Execute (output.go): exactly one
//     object on stdout, also on failure, "schema" (SetSchema) and "ok"
//     first, "error" and "exit_code" on failure (docs/output.md).
//   - One flag vocabulary (flags.go): --progress (ProgressFlag), -j/--jobs,
//     --work-dir, --to; old spellings are hidden Aliases.
//   - Progress goes to ErrOut, data (tables, JSON) to Out.
//   - Verbs have gh's shape: every command that runs is NewCmdX(f, runF);
//     runF nil runs it (Leaf wires it so), a test's runF gets the parsed
//     options. What a verb dials or opens (registry options, BuildKit,
//     warm's target) it takes from the Factory, made on first use.
package cmdutil
