// Command kiln-wheels serves kiln's stand-in wheels as a PEP 503 index for
// bench/build.sh (wheels, and a flash_attn sdist for source builds): it
// prints the index URL on stdout and serves until killed.
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
	flag.Parse()
	ix, err := wheelserve.NewIndex(wheelserve.StandIns(*torchMB)...)
	if err == nil {
		// flash_attn from source (flash_attn.build: source) compiles this.
		err = ix.AddSDist(wheelserve.FlashAttnSDist(wheelserve.FlashAttnVersion))
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
