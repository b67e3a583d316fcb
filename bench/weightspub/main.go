// Command weightspub publishes the weight files of one image layer as a kiln
// weights artifact, without rewriting the image: bench/weights.sh uses it to
// put the fixture's 300 MB safetensors in a registry quickly, so that the
// benchmark measures pulling and not stripping.
//
//	weightspub [-layer N] [-glob '*.safetensors'] IMAGE TO
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path"

	"github.com/kiln-build/kiln/layers"
	"github.com/kiln-build/kiln/weights"
)

func main() {
	layer := flag.Int("layer", -1, "only this layer index (default: all)")
	glob := flag.String("glob", "*.safetensors", "base-name pattern of the weight files")
	flag.Parse()
	if flag.NArg() != 2 {
		fmt.Fprintln(os.Stderr, "usage: weightspub [-layer N] [-glob PATTERN] IMAGE TO")
		os.Exit(2)
	}
	if err := run(context.Background(), flag.Arg(0), flag.Arg(1), *layer, *glob); err != nil {
		fmt.Fprintln(os.Stderr, "weightspub:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, image, to string, only int, glob string) error {
	r, err := layers.ParseRef(image)
	if err != nil {
		return err
	}
	img, err := layers.Open(ctx, r)
	if err != nil {
		return err
	}
	defer img.Close()
	work, err := os.MkdirTemp("", "weightspub-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	c, err := weights.NewCollector(work)
	if err != nil {
		return err
	}
	for _, l := range img.Layers {
		if only >= 0 && l.Index != only {
			continue
		}
		_, err := l.Walk(ctx, layers.WalkOptions{}, func(e *layers.Entry, body io.Reader) error {
			if ok, _ := path.Match(glob, path.Base(e.Path)); !ok || !e.IsRegular() || e.Escapes {
				return nil
			}
			return c.Divert(e.Path, e.Header, body)
		})
		if err != nil {
			return err
		}
	}
	dest, err := layers.ParseRef(to)
	if err != nil {
		return err
	}
	m, d, err := c.Publish(ctx, dest, "", img.Digest.String())
	if err != nil {
		return err
	}
	ref, err := weights.ArtifactRef(dest, d)
	if err != nil {
		return err
	}
	fmt.Printf("%s %d %d\n", ref, len(m.Files), m.Size)
	return nil
}
