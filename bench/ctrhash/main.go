// Command ctrhash measures, for bench/warm.sh, how fast a containerd
// daemon verifies a blob: it places FILE in a fresh ingest of the daemon at
// SOCKET (content root CONTENT_DIR, on this host) and times the daemon
// resuming that ingest, which reads the whole data file through its own
// sha256 (containerd's local store, resumeStatus). That rate, not the
// machine's best sha256, bounds any warm that containerd verifies: it is
// the daemon binary's Go toolchain that decides whether SHA instructions
// are used. Prints bytes and MB/s.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/content"
)

const ref = "kiln-bench-ctrhash"

func main() {
	if len(os.Args) != 4 {
		fmt.Fprintln(os.Stderr, "usage: ctrhash SOCKET CONTENT_DIR FILE")
		os.Exit(2)
	}
	if err := run(os.Args[1], os.Args[2], os.Args[3]); err != nil {
		fmt.Fprintln(os.Stderr, "ctrhash:", err)
		os.Exit(1)
	}
}

func run(sock, root, file string) error {
	c, err := client.New(sock, client.WithDefaultNamespace("default"))
	if err != nil {
		return err
	}
	defer c.Close()
	ctx, done, err := c.WithLease(context.Background())
	if err != nil {
		return err
	}
	defer done(context.Background())
	cs := c.ContentStore()
	w, err := content.OpenWriter(ctx, cs, content.WithRef(ref))
	if err != nil {
		return err
	}
	w.Close()
	defer cs.Abort(ctx, ref)
	data, err := findData(root)
	if err != nil {
		return err
	}
	if err := copyFile(file, data); err != nil {
		return err
	}
	start := time.Now()
	w, err = content.OpenWriter(ctx, cs, content.WithRef(ref))
	if err != nil {
		return err
	}
	st, err := w.Status()
	el := time.Since(start)
	w.Close()
	if err != nil {
		return err
	}
	fmt.Printf("%d bytes in %.3fs: %.0f MB/s\n", st.Offset, el.Seconds(), float64(st.Offset)/el.Seconds()/1e6)
	return nil
}

func findData(root string) (string, error) {
	ents, err := os.ReadDir(filepath.Join(root, "ingest"))
	if err != nil {
		return "", err
	}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(root, "ingest", e.Name(), "ref"))
		if err == nil && strings.HasPrefix(string(b), "default/") && strings.HasSuffix(string(b), "/"+ref) {
			return filepath.Join(root, "ingest", e.Name(), "data"), nil
		}
	}
	return "", fmt.Errorf("no ingest %s under %s", ref, root)
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
