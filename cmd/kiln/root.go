package main

import (
	"context"
	"io"
	"runtime/debug"

	"github.com/kiln-build/kiln/cmd/kiln/analyzecmd"
	"github.com/kiln-build/kiln/cmd/kiln/buildcmd"
	"github.com/kiln-build/kiln/cmd/kiln/compatcmd"
	"github.com/kiln-build/kiln/cmd/kiln/convertcmd"
	"github.com/kiln-build/kiln/cmd/kiln/fatbincmd"
	"github.com/kiln-build/kiln/cmd/kiln/hostcmd"
	"github.com/kiln-build/kiln/cmd/kiln/internal/cmdutil"
	"github.com/kiln-build/kiln/cmd/kiln/internal/verbkit"
	"github.com/kiln-build/kiln/cmd/kiln/lockcmd"
	"github.com/kiln-build/kiln/cmd/kiln/proberecordcmd"
	"github.com/kiln-build/kiln/cmd/kiln/recipescmd"
	"github.com/kiln-build/kiln/cmd/kiln/resolvecmd"
	"github.com/kiln-build/kiln/cmd/kiln/signcmd"
	"github.com/kiln-build/kiln/cmd/kiln/slimcmd"
	"github.com/kiln-build/kiln/cmd/kiln/warmcmd"
	"github.com/kiln-build/kiln/cmd/kiln/weightscmd"
)

// version, commit and date override the build info the Go toolchain
// embeds (-ldflags "-X main.version=v1.2.3 -X main.commit=... -X
// main.date=..."); left empty, kiln version reads them from the build.
var version, commit, date string

// buildInfo is this binary's build info, overridden at link time.
func buildInfo() cmdutil.BuildInfo {
	bi, _ := debug.ReadBuildInfo()
	return cmdutil.NewBuildInfo(bi, version, commit, date)
}

// verbs are kiln's commands, wired here and nowhere else (no init hooks),
// each from its own package; the order is cobra's help order. A verb that
// runs (a leaf) is wired with its runF nil (cmdutil.Leaf); a verb with
// subcommands wires its own. A verb that needs only cmdutil's Factory
// (no registry, builder or host) is wired with verbkit.Light.
var verbs = []verbkit.Verb{
	cmdutil.Leaf(analyzecmd.NewCmdAnalyze), cmdutil.Leaf(buildcmd.NewCmdBuild), compatcmd.NewCmdCompat,
	cmdutil.Leaf(convertcmd.NewCmdConvert), verbkit.Light(fatbincmd.NewCmdFatbin), hostcmd.NewCmdHost,
	cmdutil.Leaf(lockcmd.NewCmdLock), verbkit.Light(cmdutil.Leaf(proberecordcmd.NewCmdProbeRecord)),
	verbkit.Light(recipescmd.NewCmdRecipes), cmdutil.Leaf(resolvecmd.NewCmdResolve), cmdutil.Leaf(signcmd.NewCmdSign),
	cmdutil.Leaf(slimcmd.NewCmdSlim), cmdutil.Leaf(signcmd.NewCmdVerify), cmdutil.Leaf(warmcmd.NewCmdWarm),
	weightscmd.NewCmdWeights,
}

// Main runs kiln with args and returns the process exit code.
func Main(ctx context.Context, args []string, in io.Reader, out, errOut io.Writer) int {
	ios := &cmdutil.IO{In: in, Out: out, ErrOut: errOut}
	return run(ctx, args, ios)
}

func run(ctx context.Context, args []string, ios *cmdutil.IO) int {
	b := buildInfo()
	f := verbkit.New(ios, b, run)
	return cmdutil.Execute(ctx, verbkit.NewRoot(f, verbs...), args, ios)
}
