// Package cmdutil is the light toolbox every kiln verb shares, and
// nothing else: the I/O streams and the Factory's core a verb is built
// from, the stable exit codes and the errors that carry them, the root
// command (one place, no init hooks), progress (mpb bars on a terminal,
// lines elsewhere: Progress, ProgressMode), the terminal's width and
// whether to colour (TableOptions for internal/termtable), and the one
// flag vocabulary. It imports no package that reaches a registry, a
// builder or a host (TestToolboxIsLight): the flag groups and
// dependencies of those live in cmd/kiln/internal/verbkit, so a verb
// that needs none of them compiles none of them.
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
//     warm's target) it takes from verbkit.Factory, made on first use.
package cmdutil
