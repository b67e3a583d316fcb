package containerd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"google.golang.org/grpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// criNamespace is the namespace of the kubelet's CRI.
const criNamespace = "k8s.io"

// snapshotterRootPrefix begins the name of a snapshotter's root directory
// (<containerd root>/io.containerd.snapshotter.v1.NAME), which the CRI's
// ImageFsInfo reports as each image file system's mount point.
const snapshotterRootPrefix = "io.containerd.snapshotter.v1."

// criSnapshotter is the snapshotter the kubelet's pods get their root
// file systems from, asked of the CRI plugin on containerd's own socket
// (what `crictl imagefsinfo` and `crictl info` print): the default
// runtime's own snapshotter when its config names one (containerd's
// RuntimeSnapshotter), else the image service's. The image service's is
// the first image file system ImageFsInfo reports (the kubelet reads that
// one too): its mount point is that snapshotter's root. It is asked once;
// an error means the CRI could not say (no CRI plugin, a proxy
// snapshotter with no root), and kiln then picks as it does elsewhere.
func (t *Containerd) criSnapshotter(ctx context.Context) (string, error) {
	t.criOnce.Do(func() { t.criSn, t.criErr = askCRI(t.nsCtx(ctx), t.c.Conn()) })
	return t.criSn, t.criErr
}

func askCRI(ctx context.Context, c any) (string, error) {
	conn, ok := c.(grpc.ClientConnInterface)
	if !ok {
		return "", errors.New("the containerd client has no gRPC connection")
	}
	// The default runtime's snapshotter (containerd 1.7+, 2.x), from the
	// CRI's own view of its config.
	st, err := runtimeapi.NewRuntimeServiceClient(conn).Status(ctx, &runtimeapi.StatusRequest{Verbose: true})
	if err != nil {
		return "", fmt.Errorf("asking the CRI its status: %w", err)
	}
	var cfg struct {
		Containerd struct {
			Snapshotter string `json:"snapshotter"` // containerd 1.x: the CRI's snapshotter
			Default     string `json:"defaultRuntimeName"`
			Runtimes    map[string]struct {
				Snapshotter string `json:"snapshotter"`
			} `json:"runtimes"`
		} `json:"containerd"`
	}
	if s := st.GetInfo()["config"]; s != "" {
		if err := json.Unmarshal([]byte(s), &cfg); err != nil {
			return "", fmt.Errorf("the CRI's config: %v", err)
		}
	}
	if sn := cfg.Containerd.Runtimes[cfg.Containerd.Default].Snapshotter; sn != "" {
		return sn, nil
	}
	fs, err := runtimeapi.NewImageServiceClient(conn).ImageFsInfo(ctx, &runtimeapi.ImageFsInfoRequest{})
	if err != nil {
		return "", fmt.Errorf("asking the CRI its image file systems: %w", err)
	}
	if f := fs.GetImageFilesystems(); len(f) > 0 {
		base := filepath.Base(f[0].GetFsId().GetMountpoint())
		if sn, ok := strings.CutPrefix(base, snapshotterRootPrefix); ok && sn != "" {
			return sn, nil
		}
	}
	if sn := cfg.Containerd.Snapshotter; sn != "" {
		return sn, nil
	}
	return "", errors.New("the CRI names no snapshotter for its images")
}
