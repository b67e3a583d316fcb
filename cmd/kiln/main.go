// Command kiln builds slim, reproducible CUDA container images and gets them
// onto rented GPU hosts fast.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/sirupsen/logrus"
)

// shutdownGrace is how long kiln has after SIGINT or SIGTERM to stop its
// work and remove its scratch (every verb's work watches the context;
// fleet runs end their remote commands) before it exits regardless: a
// read that no context can end (a pipe that never closes) does not hold
// kiln.
const shutdownGrace = 10 * time.Second

func main() {
	// Libraries that log through logrus's standard logger speak only on
	// errors (containerd's content store warns about fsverity on an OCI
	// output directory); kiln's own messages are its output. Set once
	// here, for the process, not by a verb in the middle of its work.
	logrus.SetLevel(logrus.ErrorLevel)
	// The first SIGINT/SIGTERM cancels ctx: the command stops, cleans up
	// and exits 130 (cmdutil.Execute). Then the default action is back, so
	// a second Ctrl-C ends a clean-up that hangs, and after shutdownGrace
	// kiln ends on its own.
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		<-ctx.Done()
		cancel()
		time.Sleep(shutdownGrace)
		fmt.Fprintf(os.Stderr, "kiln: interrupted (the command did not stop within %s; kiln exited without it)\n", shutdownGrace)
		os.Exit(130)
	}()
	code := Main(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	cancel()
	os.Exit(code)
}
