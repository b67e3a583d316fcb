// Command containerd-stargz-grpc is the stargz snapshotter as a containerd
// proxy plugin, for kiln's lazy-pull test and benchmark.
//
// The snapshotter's own command lives in a separate Go module
// (github.com/containerd/stargz-snapshotter/cmd) that the Go module proxy
// does not serve, so scripts/stargz.sh builds this file against the
// library module go.mod pins instead. It is the upstream command's serving
// path without its extras (fuse manager, CRI image service, metrics,
// keychains): NewStargzSnapshotterService on --root, served over gRPC on
// --address. The configuration is the upstream TOML's fields as JSON
// (service.Config carries json tags for each), so no TOML parser is needed.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	snapshotsapi "github.com/containerd/containerd/api/services/snapshots/v1"
	"github.com/containerd/containerd/v2/contrib/snapshotservice"
	"github.com/containerd/log"
	"github.com/containerd/stargz-snapshotter/service"
	"google.golang.org/grpc"
)

func main() {
	address := flag.String("address", "/run/containerd-stargz-grpc/containerd-stargz-grpc.sock", "gRPC socket to serve on")
	root := flag.String("root", "/var/lib/containerd-stargz-grpc", "snapshotter state (snapshots, FUSE mounts, caches)")
	configPath := flag.String("config", "", "service.Config as JSON (optional)")
	logLevel := flag.String("log-level", "info", "log level")
	flag.Parse()
	if err := log.SetLevel(*logLevel); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	if err := run(*address, *root, *configPath); err != nil {
		fmt.Fprintln(os.Stderr, "containerd-stargz-grpc:", err)
		os.Exit(1)
	}
}

func run(address, root, configPath string) error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var cfg service.Config
	if configPath != "" {
		b, err := os.ReadFile(configPath)
		if err != nil {
			return err
		}
		if err := json.Unmarshal(b, &cfg); err != nil {
			return fmt.Errorf("%s: %w", configPath, err)
		}
	}
	sn, err := service.NewStargzSnapshotterService(ctx, root, &cfg)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(address), 0o700); err != nil {
		return err
	}
	os.Remove(address)
	l, err := net.Listen("unix", address)
	if err != nil {
		return err
	}
	rpc := grpc.NewServer()
	snapshotsapi.RegisterSnapshotsServer(rpc, snapshotservice.FromSnapshotter(sn))
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	errc := make(chan error, 1)
	go func() { errc <- rpc.Serve(l) }()
	select {
	case err = <-errc:
	case <-sig:
		rpc.GracefulStop()
	}
	// Close unmounts the FUSE filesystems of the layers it mounted.
	if cerr := sn.Close(); err == nil {
		err = cerr
	}
	return err
}
