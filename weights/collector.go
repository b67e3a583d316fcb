package weights

import (
	"archive/tar"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	"github.com/kiln-build/kiln/layers"
)

// Collector gathers the weight files a rewrite takes out of an image. Each
// file is streamed into workDir/blobs/sha256/<hex> while it is hashed, so
// identical files are stored once and nothing is held in memory.
type Collector struct {
	workDir string
	opts    collectorOptions

	mu    sync.Mutex
	files map[string]File // by absolute image path
	mount string          // decided by DivertMount
}

// CollectorOption configures a Collector.
type CollectorOption func(*collectorOptions)

type collectorOptions struct {
	largeFile int64
	packLimit int64
	mount     string
}

// DefaultLargeFile is the size from which a file gets its own raw layer:
// below it, a layer per file costs more in round trips than it saves.
const DefaultLargeFile = 16 << 20

// DefaultPackLimit bounds one packed tar of small files.
const DefaultPackLimit = 256 << 20

// WithLargeFileThreshold sets the size from which a file gets its own
// uncompressed layer (default 16 MiB).
func WithLargeFileThreshold(n int64) CollectorOption {
	return func(o *collectorOptions) { o.largeFile = n }
}

// WithPackLimit bounds the bytes of file content in one packed tar layer
// (default 256 MiB); past it, small files spill into another tar.
func WithPackLimit(n int64) CollectorOption {
	return func(o *collectorOptions) { o.packLimit = n }
}

// WithMount sets where the volume is mounted (an absolute directory
// holding every weight) instead of the deepest directory holding them all
// (MountFor).
func WithMount(dir string) CollectorOption {
	return func(o *collectorOptions) { o.mount = dir }
}

// NewCollector stores blobs under workDir, which it creates.
func NewCollector(workDir string, opts ...CollectorOption) (*Collector, error) {
	o := collectorOptions{largeFile: DefaultLargeFile, packLimit: DefaultPackLimit}
	for _, opt := range opts {
		opt(&o)
	}
	if err := os.MkdirAll(filepath.Join(workDir, "blobs", "sha256"), 0o755); err != nil {
		return nil, fmt.Errorf("weights work dir: %v", err)
	}
	return &Collector{workDir: workDir, opts: o, files: map[string]File{}}, nil
}

// Divert streams one weight file (path inside the image, with or without a
// leading slash) into the collector. It is safe for concurrent calls. A path
// diverted twice must carry the same bytes: a rewrite diverts the version
// visible in its output, and two different versions would make the volume
// depend on which layer finished first.
func (c *Collector) Divert(p string, hdr *tar.Header, r io.Reader) error {
	clean, escapes := cleanImagePath(p)
	if escapes || clean == "/" {
		return fmt.Errorf("weights: divert %q: not a path inside the image", p)
	}
	if hdr != nil && hdr.Typeflag != tar.TypeReg {
		return fmt.Errorf("weights: divert %q: not a regular file (tar type %q)", p, hdr.Typeflag)
	}
	sum, n, err := c.store(r)
	if err != nil {
		return fmt.Errorf("weights: divert %q: %v", p, err)
	}
	if hdr != nil && hdr.Size != n {
		return fmt.Errorf("weights: divert %q: read %d bytes, tar header says %d", p, n, hdr.Size)
	}
	mode := uint32(0o644)
	if hdr != nil {
		mode = uint32(hdr.Mode) & 0o777
	}
	f := File{Path: clean, Size: n, SHA256: sum, Mode: mode}
	c.mu.Lock()
	defer c.mu.Unlock()
	if old, ok := c.files[clean]; ok && old.SHA256 != sum {
		return fmt.Errorf("weights: divert %q twice with different contents (sha256 %s, then %s)", p, old.SHA256, sum)
	}
	c.files[clean] = f
	return nil
}

// store copies r into a blob of the work dir named by its digest. A blob
// of the same digest already there (the same file diverted from two
// paths) is replaced by the same bytes, which is harmless.
func (c *Collector) store(r io.Reader) (string, int64, error) {
	sc, err := layers.NewScratch(filepath.Join(c.workDir, "blobs", "sha256"))
	if err != nil {
		return "", 0, err
	}
	defer sc.Abort()
	if _, err := io.Copy(sc, r); err != nil {
		return "", 0, err
	}
	dg, n, _, err := sc.Commit()
	return dg.Hex, n, err
}

// DivertMount implements slim.MountDiverter: given the weights a rewrite
// diverts (absolute image paths), it decides where the volume is mounted
// (WithMount's directory, or MountFor), so that the rewrite diverts every
// other file below it too and the mount hides nothing the image had.
// Publish then uses that mount.
func (c *Collector) DivertMount(weights []string) (string, error) {
	mount := c.opts.mount
	if mount == "" {
		mount = MountFor(weights)
	}
	mount = path.Clean(mount)
	if !path.IsAbs(mount) || mount == "/" {
		if c.opts.mount == "" {
			return "", fmt.Errorf("weights: %s and %s share no directory below /: mounting their volume over / would hide the whole image; move the weights into one directory, or pass a directory with --mount (--weights-mount for slim)", weights[0], weights[len(weights)-1])
		}
		return "", fmt.Errorf("weights: mount %q: want an absolute directory below /", c.opts.mount)
	}
	for _, w := range weights {
		if !within(w, mount) {
			return "", fmt.Errorf("weights: %s is not below the mount %s: choose a directory that holds every weight file", w, mount)
		}
	}
	c.mu.Lock()
	c.mount = mount
	c.mu.Unlock()
	return mount, nil
}

// blobPath is where a content blob lives in the work dir.
func (c *Collector) blobPath(hexsum string) string {
	return filepath.Join(c.workDir, "blobs", "sha256", hexsum)
}

// Files lists what was diverted, sorted by path; paths are absolute image
// paths and Layer is empty until Publish.
func (c *Collector) Files() []File {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]File, 0, len(c.files))
	for _, f := range c.files {
		out = append(out, f)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out
}

// cleanImagePath returns "/a/b" for "a/b", "./a/b" or "/a/b"; escapes is
// true for names that climb above the root. An image path may be
// absolute, so only ".." is an escape (layers.CleanPath also calls a
// leading "/" one).
func cleanImagePath(p string) (string, bool) {
	c, escapes := layers.CleanPath(strings.TrimLeft(strings.ReplaceAll(p, "\\", "/"), "/"))
	if escapes {
		return "", true
	}
	return "/" + c, false
}

// MountFor is the deepest directory that contains every path (absolute
// image paths): the default mount of a volume.
func MountFor(paths []string) string {
	if len(paths) == 0 {
		return ""
	}
	common := path.Dir(paths[0])
	for _, p := range paths[1:] {
		for !within(p, common) {
			common = path.Dir(common)
		}
	}
	return common
}

// within reports whether p lies below dir.
func within(p, dir string) bool {
	if dir == "/" {
		return true
	}
	return strings.HasPrefix(p, dir+"/")
}
