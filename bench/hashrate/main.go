// Command hashrate prints how fast this machine computes sha256 with Go's
// crypto/sha256 (what kiln and crane both use) over a file, best of -n
// passes: bench/weights.sh reads it from the page cache to report the
// machine's hashing limit next to the pull throughputs.
//
//	hashrate [-n 3] FILE
package main

import (
	"crypto/sha256"
	"flag"
	"fmt"
	"io"
	"os"
	"time"
)

func main() {
	n := flag.Int("n", 3, "passes; the fastest is printed")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: hashrate [-n N] FILE")
		os.Exit(2)
	}
	best := time.Duration(0)
	var size int64
	buf := make([]byte, 1<<20)
	for i := 0; i < *n; i++ {
		f, err := os.Open(flag.Arg(0))
		if err != nil {
			fmt.Fprintln(os.Stderr, "hashrate:", err)
			os.Exit(1)
		}
		start := time.Now()
		size, err = io.CopyBuffer(sha256.New(), f, buf)
		d := time.Since(start)
		f.Close()
		if err != nil {
			fmt.Fprintln(os.Stderr, "hashrate:", err)
			os.Exit(1)
		}
		if best == 0 || d < best {
			best = d
		}
	}
	// seconds, for the script's table
	fmt.Printf("%.4f %d\n", best.Seconds(), size)
}
