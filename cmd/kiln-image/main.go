// Command kiln-image builds kiln's own container image from static kiln
// binaries (make dist) and a CA bundle, writes it to a registry or an
// oci: layout, and prints its digest: 'make image' runs it. One binary
// gives an image, several a multi-platform index.
//
//	kiln-image --to oci:dist/image:v1.2.0 linux/amd64=dist/kiln-linux-amd64 linux/arm64=dist/kiln-linux-arm64
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/kiln-build/kiln/internal/selfimage"
	"github.com/kiln-build/kiln/layers"
	"github.com/kiln-build/kiln/registry"
)

func main() {
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:])
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "kiln-image:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("kiln-image", flag.ContinueOnError)
	to := fs.String("to", "", "where to write the image: REGISTRY/REPO:TAG or oci:DIR[:TAG]")
	ca := fs.String("ca-certs", selfimage.CACertPath, "CA bundle to put in the image")
	version := fs.String("version", "", "org.opencontainers.image.version label")
	revision := fs.String("revision", "", "org.opencontainers.image.revision label (the commit)")
	insecure := fs.Bool("insecure", false, "plain HTTP to the --to registry (a local test registry)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *to == "" || fs.NArg() == 0 {
		return fmt.Errorf("usage: kiln-image --to REF PLATFORM=FILE... (make image runs it)")
	}
	var bs []selfimage.Binary
	for _, a := range fs.Args() {
		b, err := selfimage.ParseBinary(a)
		if err != nil {
			return err
		}
		bs = append(bs, b)
	}
	labels := map[string]string{"org.opencontainers.image.source": "https://github.com/kiln-build/kiln",
		"org.opencontainers.image.title": "kiln"}
	if *version != "" {
		labels["org.opencontainers.image.version"] = *version
	}
	if *revision != "" {
		labels["org.opencontainers.image.revision"] = *revision
	}
	opts := []selfimage.Option{selfimage.WithCACerts(*ca), selfimage.WithLabels(labels)}
	// SOURCE_DATE_EPOCH (the commit's time, from make) dates the image.
	if s := os.Getenv("SOURCE_DATE_EPOCH"); s != "" {
		sec, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return fmt.Errorf("SOURCE_DATE_EPOCH=%q: not a number of seconds", s)
		}
		opts = append(opts, selfimage.WithCreated(time.Unix(sec, 0)))
	}
	var lopts []registry.Option
	dest, err := layers.ParseRef(*to)
	if err != nil {
		return err
	}
	if *insecure && dest.Name != nil {
		lopts = append(lopts, registry.WithInsecureRegistries(dest.Name.Context().RegistryStr()))
		if dest, err = layers.ParseRef(*to, lopts...); err != nil {
			return err
		}
	}
	var dg v1.Hash
	if len(bs) == 1 {
		img, err := selfimage.Image(bs[0], opts...)
		if err != nil {
			return err
		}
		if dg, err = layers.Write(ctx, img, dest, lopts...); err != nil {
			return err
		}
	} else {
		idx, err := selfimage.Index(bs, opts...)
		if err != nil {
			return err
		}
		if dg, err = layers.WriteIndex(ctx, idx, dest, lopts...); err != nil {
			return err
		}
	}
	fmt.Printf("%s\n", dg)
	// A pushed image: the flags that pin it by digest where kiln names
	// its own image.
	if r, err := layers.ParseRef(*to); err == nil && r.Name != nil {
		pinned := r.Name.Context().Digest(dg.String()).String()
		fmt.Fprintf(os.Stderr, "pin it: kiln weights run-args --init-image %s; kiln warm --emit --kiln-image %s\n", pinned, pinned)
	}
	return nil
}
