// Command kiln-wheels serves kiln's stand-in wheels as a PEP 503/691 index
// for bench/build.sh and make demo (wheels, and flash_attn sdists for source
// builds), plus, with -dir, real wheels from a directory (the fixtures'
// torch 2.6.0+cu124 and nvidia-*-cu12 wheels, which replace the torch
// stand-in), or, with -catalog, the stand-ins of every catalog recipe's
// pins and their dependencies (wheelserve.CatalogIndex): it prints the
// index URL on stdout and serves until killed.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/kiln-build/kiln/builder/internal/wheelserve"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:0", "listen address")
	torchMB := flag.Int("torch-mb", 64, "padding in the torch stand-in, MiB")
	dir := flag.String("dir", "", "also serve the wheels DIR/SHA256SUMS lists (e.g. $KILN_FIXTURES/wheels); a real torch replaces the stand-in")
	catalog := flag.Bool("catalog", false, "serve the stand-ins of every catalog recipe's pip requirements and their dependencies instead")
	flag.Parse()
	var ix *wheelserve.Index
	var err error
	if *catalog {
		ix, err = wheelserve.CatalogIndex()
	} else {
		ix, err = wheelserve.NewIndex(wheelserve.StandIns(*torchMB)...)
	}
	for _, v := range []string{wheelserve.FlashAttnVersion, wheelserve.FlashAttnVersionCU12} {
		if err == nil && !*catalog {
			// flash_attn from source (flash_attn.build: source) compiles this.
			err = ix.AddSDist(wheelserve.FlashAttnSDist(v))
		}
	}
	if err == nil && *dir != "" {
		ix.Remove("torch")
		err = ix.AddDir(*dir)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	url, stop, err := wheelserve.Serve(ix, *addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer stop()
	fmt.Println(url)
	c := make(chan os.Signal, 1)
	signal.Notify(c, os.Interrupt, syscall.SIGTERM)
	<-c
}
