// Package analyzecmd is kiln analyze: the flags of one image report
// (--ci rules, --kernels, --gpu, --html) turned into analyze.Options, and
// the report printed (a table, one JSON object, an HTML page). --against
// OTHER analyzes a baseline too and prints analyze.Diff of the two reports
// instead (the table), beside the report (--json's "against", the page).
// The reading, classifying and comparing live in analyze; --ci's exit code
// 3 is cmdutil's.
//
// NewCmdAnalyze(f, runF): runF, when not nil, gets the parsed
// AnalyzeOptions instead of the analysis running.
package analyzecmd
