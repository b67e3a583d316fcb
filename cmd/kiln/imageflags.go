package main

import (
	"github.com/kiln-build/kiln/layers"
	"github.com/spf13/cobra"
)

// imageFlags are the flags every command that reads images shares.
type imageFlags struct {
	Platform         string
	InsecureRegistry []string
}

func (f *imageFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.Platform, "platform", "linux/amd64", "platform to select from a multi-platform image (linux/amd64, linux/arm64)")
	cmd.Flags().StringSliceVar(&f.InsecureRegistry, "insecure-registry", nil, "registry host that speaks plain HTTP (repeatable; loopback hosts always may)")
}

// options turns the flags into layers options; a bad platform is a usage error.
func (f *imageFlags) options() ([]layers.Option, error) {
	p, err := layers.ParsePlatform(f.Platform)
	if err != nil {
		return nil, usageErr("--platform: %v", err)
	}
	return []layers.Option{layers.WithPlatform(p), layers.WithInsecureRegistries(f.InsecureRegistry...)}, nil
}
