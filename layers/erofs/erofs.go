package erofs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/uuid"

	"github.com/kiln-build/kiln/internal/atomicfile"
	"github.com/kiln-build/kiln/internal/procgroup"
)

// Compression is the algorithm of the blocks inside an image, which the
// kernel decompresses as they are read.
type Compression string

// The compressions mkfs.erofs and Linux's EROFS both know.
const (
	None  Compression = "none"
	LZ4   Compression = "lz4"
	LZ4HC Compression = "lz4hc"
	Zstd  Compression = "zstd"
	LZMA  Compression = "lzma"
)

// DefaultCompression is the one docs/erofs.md chose from measurements:
// lz4hc is decoded by the same fast LZ4 decoder as lz4 (the kernel reads
// it at memory speed), while its images are nearly as small as zstd's.
const DefaultCompression = LZ4HC

// Compressions lists the valid values of Compression, for flag help.
var Compressions = []Compression{None, LZ4, LZ4HC, Zstd, LZMA}

// ParseCompression reads a --erofs-compression flag value.
func ParseCompression(s string) (Compression, error) {
	for _, c := range Compressions {
		if string(c) == s {
			return c, nil
		}
	}
	names := make([]string, len(Compressions))
	for i, c := range Compressions {
		names[i] = string(c)
	}
	return "", fmt.Errorf("unknown EROFS compression %q: use one of %s", s, strings.Join(names, ", "))
}

// Mkfs is the program Convert runs.
const Mkfs = "mkfs.erofs"

// physicalCluster is the largest compressed unit, as containerd converts
// (-C 65536): larger clusters compress better and still decode quickly.
const physicalCluster = "65536"

type options struct {
	compression Compression
	diffID      v1.Hash
	tempDir     string
	maxSize     int64
}

// Option tunes a conversion.
type Option func(*options)

// WithCompression sets the compression of the image's blocks
// (DefaultCompression when not given; None stores them as they are).
func WithCompression(c Compression) Option { return func(o *options) { o.compression = c } }

// WithDiffID gives the tar's diff ID, from which the filesystem UUID is
// derived exactly as containerd derives it when it converts the same
// layer, so kiln's image and containerd's own conversion agree. Without
// it the UUID is a fixed one of kiln's: the image is still reproducible.
func WithDiffID(d v1.Hash) Option { return func(o *options) { o.diffID = d } }

// WithTempDir puts mkfs.erofs's own scratch files (file data it sorts or
// compresses) and Convert's image file in dir rather than $TMPDIR: pass
// a directory on a disk with room for the layer.
func WithTempDir(dir string) Option { return func(o *options) { o.tempDir = dir } }

// WithMaxSize bounds the tar: n is the most its stream can be (the blob's
// size for an uncompressed layer, else layers.MaxDecoded of it). The
// sizes its entries declare are counted against n, and one past it is
// refused before mkfs.erofs sees its header. Without it the bound is
// MaxSize.
func WithMaxSize(n int64) Option { return func(o *options) { o.maxSize = n } }

// MaxSize bounds a tar converted without WithMaxSize: no container layer
// comes near 4 TiB, and mkfs.erofs would otherwise take a header's word
// for a file's size (a sparse scratch file of that size, and a wait for
// data that never comes).
const MaxSize = 4 << 40

// ErrNoMkfs is Check's error when no usable mkfs.erofs (or no fsck.erofs,
// which checks each image kiln writes) is installed.
var ErrNoMkfs = errors.New("--format erofs needs mkfs.erofs and fsck.erofs from erofs-utils 1.7 or later " +
	"(its --tar mode): apt install erofs-utils on Debian 13 or Ubuntu 24.04, dnf install erofs-utils " +
	"on Fedora; Debian 12 and Ubuntu 22.04 ship 1.5, too old: build 1.8 from its source " +
	"(git clone https://git.kernel.org/pub/scm/linux/kernel/git/xiang/erofs-utils.git; ./autogen.sh && ./configure && make install)")

// Check says whether mkfs.erofs is installed and can read tar streams,
// and fsck.erofs beside it; its error is ErrNoMkfs, in words with the fix.
func Check(ctx context.Context) error {
	path, err := exec.LookPath(Mkfs)
	if err != nil {
		return ErrNoMkfs
	}
	if _, err := exec.LookPath(FsckProgram); err != nil {
		return fmt.Errorf("no %s: %w", FsckProgram, ErrNoMkfs)
	}
	// --help exits non-zero on some versions; only its text matters.
	out, _ := procgroup.Command(ctx, path, "--help").CombinedOutput()
	if !bytes.Contains(out, []byte("--tar=")) {
		return fmt.Errorf("%s has no --tar mode: %w", path, ErrNoMkfs)
	}
	return nil
}

// kilnNamespace is the UUID of images converted without a diff ID.
var kilnNamespace = uuid.NewSHA1(uuid.NameSpaceURL, []byte("https://github.com/kiln-build/kiln/erofs"))

// UUID is the filesystem UUID of the image of the tar whose diff ID is
// diffID: containerd's derivation (core/images/converter/erofs), so that
// a layer gives one image whoever converts it.
func UUID(diffID v1.Hash) string {
	if diffID == (v1.Hash{}) {
		return kilnNamespace.String()
	}
	return uuid.NewSHA1(uuid.NameSpaceURL, []byte("erofs:blobs/"+diffID.String())).String()
}

// Args is mkfs.erofs's command line for converting a tar on its standard
// input into the image at path: containerd's flags, a fixed build time
// (-T0 --mkfs-time: files keep the tar's times) and a fixed UUID.
func Args(path string, opts ...Option) []string {
	o := resolve(opts)
	args := []string{"--tar=f", "--aufs", "--quiet", "-Enoinline_data", "-b4096",
		"-T0", "--mkfs-time", "-U", UUID(o.diffID)}
	if o.compression != None {
		args = append(args, "-z"+string(o.compression), "-C", physicalCluster)
	}
	return append(args, path)
}

func resolve(opts []Option) options {
	o := options{compression: DefaultCompression, maxSize: MaxSize}
	for _, opt := range opts {
		opt(&o)
	}
	return o
}

// ConvertFile writes the EROFS image of the uncompressed tar stream tar
// to path, atomically: path is the whole image or is left as it was.
func ConvertFile(ctx context.Context, tar io.Reader, path string, opts ...Option) error {
	f, err := atomicfile.Create(path, 0o644)
	if err != nil {
		return err
	}
	defer f.Abort()
	if err := run(ctx, tar, f.Name(), opts); err != nil {
		return err
	}
	return f.Commit()
}

// Convert writes the EROFS image of the uncompressed tar stream tar to w
// and returns its size. mkfs.erofs writes the image to a file (it seeks
// back to write the superblock and directories), so the image passes
// through a temporary file (WithTempDir) that is removed before Convert
// returns.
func Convert(ctx context.Context, tar io.Reader, w io.Writer, opts ...Option) (int64, error) {
	o := resolve(opts)
	f, err := os.CreateTemp(o.tempDir, ".erofs-*.tmp")
	if err != nil {
		return 0, err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	if err := run(ctx, tar, f.Name(), opts); err != nil {
		return 0, err
	}
	// mkfs.erofs wrote through its own descriptor; f's offset is still 0.
	return io.Copy(w, f)
}

// run converts the tar into the image at path: the tar passes through
// kiln's own reader (tarGate) on its way into mkfs.erofs, which sees only
// what that reader accepted, and the image is checked by fsck.erofs. A
// tar kiln refuses ends mkfs.erofs (its whole process group).
func run(ctx context.Context, tar io.Reader, path string, opts []Option) error {
	if err := Check(ctx); err != nil {
		return err
	}
	o := resolve(opts)
	if _, err := ParseCompression(string(o.compression)); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cmd := procgroup.Command(ctx, Mkfs, Args(path, opts...)...)
	var stderr bytes.Buffer
	cmd.Stdout = &stderr
	cmd.Stderr = &stderr
	if o.tempDir != "" {
		cmd.Env = append(os.Environ(), "TMPDIR="+o.tempDir)
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting mkfs.erofs: %v", err)
	}
	ferr := feed(ctx, tar, stdin, o.maxSize)
	stdin.Close()
	if ferr != nil && !errors.Is(ferr, errMkfsGone) {
		cancel()
		cmd.Wait()
		return ferr
	}
	if err := cmd.Wait(); err != nil || ferr != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err == nil {
			err = ferr
		}
		return fmt.Errorf("mkfs.erofs could not convert the layer: %s (%v)", lastLine(stderr.String()), err)
	}
	return Fsck(ctx, path)
}

// FsckProgram is the program Fsck runs.
const FsckProgram = "fsck.erofs"

// Fsck checks the EROFS image at path with fsck.erofs (its superblock,
// every inode, directory and extent): an image kiln wrote before it is
// published, a native layer before the kernel mounts it.
func Fsck(ctx context.Context, path string) error {
	prog, err := exec.LookPath(FsckProgram)
	if err != nil {
		return fmt.Errorf("checking the EROFS image %s: no %s: %w", path, FsckProgram, ErrNoMkfs)
	}
	out, err := procgroup.Command(ctx, prog, path).CombinedOutput()
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("fsck.erofs finds the EROFS image %s broken: %s (%v): kiln neither publishes nor mounts it", path, lastLine(string(out)), err)
	}
	return nil
}

// lastLine is the end of mkfs.erofs's complaint: its last non-empty line,
// cut to what fits a terminal line.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	l := strings.TrimSpace(lines[len(lines)-1])
	if l == "" {
		return "no message"
	}
	if len(l) > 200 {
		l = l[:200] + "…"
	}
	return l
}
