// Command decompress is the baseline for bench/analyze.sh: it reads every
// layer of an image and decompresses it to nowhere, with the same decoders,
// digest checks and parallelism as kiln analyze, so the ratio between the
// two measures what analysis itself costs.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"runtime"
	"sync"

	"github.com/kiln-build/kiln/layers"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: decompress IMAGE")
		os.Exit(2)
	}
	ctx := context.Background()
	r, err := layers.ParseRef(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	img, err := layers.Open(ctx, r)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer img.Close()
	sem := make(chan struct{}, min(runtime.GOMAXPROCS(0), 4))
	var wg sync.WaitGroup
	var mu sync.Mutex
	var total int64
	var firstErr error
	for _, l := range img.Layers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			// A walk whose callback reads every body: the floor that any
			// analysis of a compressed layer pays.
			st, err := l.Walk(ctx, layers.WalkOptions{}, func(_ *layers.Entry, body io.Reader) error {
				_, err := io.Copy(io.Discard, body)
				return err
			})
			mu.Lock()
			defer mu.Unlock()
			if err != nil && firstErr == nil {
				firstErr = err
			}
			total += st.UncompressedSize
		}()
	}
	wg.Wait()
	if firstErr != nil {
		fmt.Fprintln(os.Stderr, firstErr)
		os.Exit(1)
	}
	fmt.Printf("decompressed %d bytes\n", total)
}
