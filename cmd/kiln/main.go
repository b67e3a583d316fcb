// Command kiln builds slim, reproducible CUDA container images and gets them
// onto rented GPU hosts fast.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	// The first SIGINT/SIGTERM cancels ctx: the command stops, cleans up
	// and exits 130 (cmdutil.Execute). Then the default action is back, so
	// a second Ctrl-C ends a clean-up that hangs.
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		<-ctx.Done()
		cancel()
	}()
	code := Main(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	cancel()
	os.Exit(code)
}
