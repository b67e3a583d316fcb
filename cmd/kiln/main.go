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
)

// shutdownGrace is how long kiln has after SIGINT or SIGTERM to stop its
// work and remove its scratch (every verb's work watches the context;
// fleet runs end their remote commands) before it exits regardless: a
// read that no context can end (a pipe that never closes) does not hold
// kiln. A second signal ends kiln at once.
const shutdownGrace = 10 * time.Second

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		<-ctx.Done()
		stop() // the default action again: a second signal ends kiln now
		time.Sleep(shutdownGrace)
		fmt.Fprintf(os.Stderr, "kiln: interrupted; the same command resumes (kiln did not stop within %s and exited)\n", shutdownGrace)
		os.Exit(130)
	}()
	code := Main(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
