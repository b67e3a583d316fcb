package weights

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"golang.org/x/sync/errgroup"
	"golang.org/x/time/rate"

	"github.com/kiln-build/kiln/internal/atomicfile"
	"github.com/kiln-build/kiln/internal/bytesize"
	"github.com/kiln-build/kiln/internal/preflight"
	"github.com/kiln-build/kiln/layers"
	"github.com/kiln-build/kiln/layers/blob"
	"github.com/kiln-build/kiln/registry"
)

// ErrCorrupt marks a blob or file whose bytes do not match its digest.
var ErrCorrupt = errors.New("corrupt")

// PullOptions tune Pull.
type PullOptions struct {
	// Jobs is how many blobs download at once (default 4).
	Jobs int
	// SkipSpaceCheck skips the disk preflight (tests of the write path's
	// own disk-full handling), as warm.Options' does.
	SkipSpaceCheck bool
	// Attempts is how many times one blob is tried in this run, resuming
	// from the bytes already on disk after a broken transfer, from zero
	// after a corrupt one (default 3).
	Attempts int
	// Progress, when set, counts bytes fetched or found already present.
	Progress *atomic.Int64
	// BlobProgress, when set, gives the counter of one blob's bytes as
	// its fetch starts (a bar per file); that blob's fetched bytes are
	// counted there instead of in Progress. Called from several
	// goroutines.
	BlobProgress func(digest string, size int64) *atomic.Int64
	// ChunkSize is the size of the parallel Range requests a large blob
	// (at least 4 chunks) is split into (default DefaultChunkSize; < 0:
	// every blob on one connection).
	ChunkSize int64
	// Concurrency bounds the HTTP requests in flight across the whole pull
	// (default DefaultConcurrency).
	Concurrency int
	// LimitRate caps the pull's total transfer in bytes per second (0: no
	// limit).
	LimitRate int64
	// OnWait, when set, is called once if another pull holds the volume's
	// lock and this one has to wait for it (ctx bounds the wait).
	OnWait func()
	// Limiter, when set, paces the pull instead of LimitRate: one limiter
	// shared with other transfers (kiln warm --weights-into) caps them all.
	Limiter *rate.Limiter
	// Recheck skips the ready shortcut: every file present is hashed and
	// what is wrong is fetched again, the marker rewritten, all under the
	// volume's lock. For a caller whose own Verify found a file that does
	// not match though the marker and the cheap check say ready (a
	// same-size rewrite that kept its modification time).
	Recheck bool
	// TrustMarker lets the cheap check alone decide that a volume is
	// ready (marker, sizes, modes, modification times), without hashing:
	// bit rot or a rewrite that kept a file's size and times goes unseen.
	// By default a volume whose cheap check passes is hashed too (Jobs
	// files at once) before it is called ready, and healed if it is not.
	TrustMarker bool
	// Good names files the caller hashed just before and found right
	// (kiln warm's readiness check, which found others wrong): with
	// Recheck they are not hashed again, so that a volume is hashed once
	// per warm.
	Good map[string]bool

	sync blob.SyncMode // benchmarks compare durability strategies
}

// PullResult says what a pull did.
type PullResult struct {
	SetDigest string `json:"set_digest"`
	Files     int    `json:"files"`
	Bytes     int64  `json:"bytes"`
	// Fetched is the bytes transferred in this run; Resumed the bytes a
	// previous run had already left in .kiln-partial.
	Fetched int64 `json:"fetched"`
	Resumed int64 `json:"resumed"`
	// Present counts files that were already in place and verified.
	Present int `json:"present"`
	// AlreadyReady is true when the marker already matched: nothing done.
	AlreadyReady bool `json:"already_ready"`
	// Verified is true when every file of the volume was hashed before
	// it was called ready: by this pull (present files hashed, fetched
	// ones verified as they were written) or, for Good files, by its
	// caller (false with TrustMarker).
	Verified bool `json:"verified"`
	// Migrated is true when the volume was in kiln's old layout (model
	// files at its top level) and this pull moved them into ModelDir.
	Migrated bool `json:"migrated,omitempty"`
}

// Pull materialises the volume m into dir from src: the files in
// dir/model (ModelDir), kiln's bookkeeping beside it. Blobs are staged in
// dir/.kiln-partial (resumed with a Range request after an interruption),
// verified, and only when every file is verified are they renamed into
// place; the marker dir/.kiln-ready (the set digest) is written last. An
// error before that point (a broken transfer, a corrupt blob, a full disk)
// leaves every file of the volume as it was. A volume in kiln's old layout
// (files at dir's top level) is migrated first, under the lock (see
// migrate), then verified as any volume whose marker is gone.
func Pull(ctx context.Context, m *Manifest, src blob.Source, dir string, opts PullOptions) (*PullResult, error) {
	if err := m.Validate(); err != nil {
		return nil, fmt.Errorf("volume manifest: %v", err)
	}
	if src == nil {
		return nil, fmt.Errorf("volume manifest: no repository to fetch its blobs from (pass --from REGISTRY/REPO or oci:DIR)")
	}
	if opts.Jobs <= 0 {
		opts.Jobs = 4
	}
	if opts.Attempts <= 0 {
		opts.Attempts = 3
	}
	if opts.ChunkSize == 0 {
		opts.ChunkSize = DefaultChunkSize
	}
	if opts.Concurrency <= 0 {
		opts.Concurrency = DefaultConcurrency
	}
	res := &PullResult{SetDigest: m.SetDigest, Files: len(m.Files), Bytes: m.Size}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	unlock, err := lockVolume(ctx, dir, opts.OnWait)
	readOnly := false
	if err != nil {
		// A ready volume on a read-only mount without a lock file (an
		// init check) is still ready; nothing can be changed there anyway.
		if !errors.Is(err, ErrVolumeBusy) && !opts.Recheck && readyIntact(dir, m) {
			unlock, readOnly = func() {}, true
		} else {
			if l, lerr := volumeLayout(dir); lerr == nil && l == layoutOld {
				return nil, fmt.Errorf("%w; the volume is in kiln's old layout (files at its top level): a pull that can lock and write it moves them into %s/", err, ModelDir)
			}
			return nil, err
		}
	}
	defer unlock()
	if !readOnly {
		if res.Migrated, err = prepareLayout(dir); err != nil {
			return nil, err
		}
	}
	root := filepath.Join(dir, ModelDir)
	good := map[string]bool{} // files hashed here (or by the caller) and found right
	if opts.Recheck {
		for _, f := range m.Files {
			if opts.Good[f.Path] {
				good[f.Path] = true
				if opts.Progress != nil {
					opts.Progress.Add(f.Size)
				}
			}
		}
	}
	if !opts.Recheck && readyIntact(dir, m) {
		if opts.TrustMarker {
			res.AlreadyReady = true
			if opts.Progress != nil {
				opts.Progress.Add(m.Size)
			}
			return res, nil
		}
		if good, err = hashPresent(ctx, root, m, opts.Jobs, opts.Progress); err != nil {
			return nil, err
		}
		if len(good) == len(m.Files) {
			res.AlreadyReady, res.Verified, res.Present = true, true, len(m.Files)
			return res, nil
		}
		// A file the cheap check passed does not hash right (bit rot, a
		// rewrite that kept its times): heal it as any damaged volume.
	}
	p := &puller{m: m, src: src, dir: dir, root: root, opts: opts, res: res, staged: map[string]string{},
		conns: make(chan struct{}, opts.Concurrency), limit: opts.Limiter, good: good}
	if p.limit == nil {
		p.limit = blob.NewLimiter(opts.LimitRate)
	}
	if err := p.plan(); err != nil {
		return nil, err
	}
	if err := p.preflight(); err != nil {
		return nil, err
	}
	if err := p.fetchAll(ctx); err != nil {
		if blob.IsNoSpace(err) {
			p.cleanRun()
			return nil, fmt.Errorf("%s: no space left on the device holding the volume (%s needed); nothing was changed: %w", dir, bytesize.Format(p.need), err)
		}
		return nil, err
	}
	if err := p.commit(); err != nil {
		return nil, err
	}
	res.Verified = true
	return res, nil
}

// ErrVolumeBusy is returned (wrapped) when the wait for another pull's
// lock on the same volume ended before the lock was free.
var ErrVolumeBusy = errors.New("volume busy")

// lockVolume serialises pulls into dir on dir/.kiln-lock.
func lockVolume(ctx context.Context, dir string, onWait func()) (func(), error) {
	unlock, err := atomicfile.Lock(ctx, filepath.Join(dir, LockFile), onWait)
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("%s: another kiln weights pull holds %s: %w: %v", dir, LockFile, ErrVolumeBusy, err)
		}
		return nil, fmt.Errorf("%s: locking the volume: %v", dir, err)
	}
	return unlock, nil
}

// Intact is the cheap check that a volume is ready (readyIntact): for a
// caller that has just had every file hashed (PullResult.Verified).
func Intact(dir string, m *Manifest) bool { return readyIntact(dir, m) }

// readyIntact is the cheap check that lets a ready volume be left alone:
// the volume is in the current layout, the marker names m's set, the kept
// manifest is there, and every file (in dir/model) is
// a regular file of its size and mode, not modified since the marker was
// written. Anything else sends the pull through plan, which hashes what is
// present and fetches what is wrong. Bit rot, or a same-size rewrite that
// also restores the old mtime, passes it: Pull hashes the files after it
// (hashPresent) unless TrustMarker says not to.
func readyIntact(dir string, m *Manifest) bool {
	marker := filepath.Join(dir, ReadyMarker)
	b, err := os.ReadFile(marker)
	if err != nil || strings.TrimSpace(string(b)) != m.SetDigest {
		return false
	}
	mi, err := os.Stat(marker)
	if err != nil {
		return false
	}
	if _, err := os.Lstat(filepath.Join(dir, ManifestFile)); err != nil {
		return false
	}
	if l, err := volumeLayout(dir); err != nil || l != layoutModel {
		return false
	}
	root := filepath.Join(dir, ModelDir)
	if fi, err := os.Lstat(root); err != nil || !fi.IsDir() {
		return false
	}
	for _, f := range m.Files {
		target, err := safeTarget(root, f.Path)
		if err != nil {
			return false
		}
		fi, err := os.Lstat(target)
		if err != nil || !fi.Mode().IsRegular() || fi.Size() != f.Size ||
			uint32(fi.Mode().Perm()) != f.Mode || fi.ModTime().After(mi.ModTime()) {
			return false
		}
	}
	return true
}

type puller struct {
	m    *Manifest
	src  blob.Source
	dir  string // the volume: bookkeeping at its top level
	root string // dir/model: the model files
	opts PullOptions
	res  *PullResult
	good map[string]bool // files already hashed and found right

	needBy map[string][]File // files to fetch, by layer digest
	need   int64             // their bytes

	conns chan struct{} // one slot per HTTP request in flight
	limit *rate.Limiter

	mu      sync.Mutex
	staged  map[string]string // file path → verified file in .kiln-partial
	created []string          // partials this run created (a full disk removes them)
	fetched atomic.Int64
	resumed atomic.Int64
}

func (p *puller) partial(name string) string { return filepath.Join(p.dir, PartialDir, name) }

// plan checks every target path and keeps only the files that are not
// already in place with the right bytes.
func (p *puller) plan() error {
	p.needBy = map[string][]File{}
	for _, f := range p.m.Files {
		target, err := safeTarget(p.root, f.Path)
		if err != nil {
			return err
		}
		if p.good[f.Path] {
			p.res.Present++ // hashed (and counted in Progress) already
			continue
		}
		ok, err := present(target, f)
		if err != nil {
			return err
		}
		if ok {
			p.res.Present++
			if p.opts.Progress != nil {
				p.opts.Progress.Add(f.Size)
			}
			continue
		}
		p.needBy[f.Layer] = append(p.needBy[f.Layer], f)
		p.need += f.Size
	}
	return nil
}

// preflight checks, before a byte is fetched, that the volume's disk
// holds what the pull writes at its peak: the files, and beside them each
// packed (tar) layer's blob, staged whole while its files are extracted
// (a pull that counted the files alone passed, then ran out of space).
func (p *puller) preflight() error {
	if len(p.needBy) == 0 || p.opts.SkipSpaceCheck {
		return nil
	}
	var staged int64
	for _, l := range p.m.Layers {
		if len(p.needBy[l.Digest]) > 0 && l.MediaType != MediaTypeWeightRaw {
			staged += l.Size
		}
	}
	what := "the weights volume's files"
	if staged > 0 {
		what = fmt.Sprintf("the weights volume's files (%s) and its packed layers staged beside them (%s)", bytesize.Format(p.need), bytesize.Format(staged))
	}
	if err := preflight.Disk(p.dir, p.need+staged, what); err != nil {
		return fmt.Errorf("weights pull into %s: %w; nothing was fetched", p.dir, err)
	}
	return nil
}

// fetchAll downloads and verifies every needed layer, several at once.
func (p *puller) fetchAll(ctx context.Context) error {
	if len(p.needBy) == 0 {
		return nil
	}
	if err := mkdirSafe(p.dir, PartialDir); err != nil {
		return err
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(p.opts.Jobs)
	for _, l := range p.m.Layers {
		files := p.needBy[l.Digest]
		if len(files) == 0 {
			continue
		}
		g.Go(func() error {
			if l.MediaType == MediaTypeWeightRaw {
				return p.fetchRaw(gctx, l, files)
			}
			return p.fetchTar(gctx, l, files)
		})
	}
	err := g.Wait()
	p.res.Fetched = p.fetched.Load()
	p.res.Resumed = p.resumed.Load()
	return err
}

// fetchRaw stages a raw layer: the blob is the file. Further paths with the
// same content get their own copy (their modes may differ).
func (p *puller) fetchRaw(ctx context.Context, l Layer, files []File) error {
	part, err := p.fetchBlob(ctx, l)
	if err != nil {
		return err
	}
	p.stage(files[0].Path, part)
	for i, f := range files[1:] {
		cp := p.partial(fmt.Sprintf("%s.%d.copy", strings.TrimPrefix(l.Digest, "sha256:"), i+1))
		if err := p.copyFile(part, cp); err != nil {
			return fmt.Errorf("%s: %w", f.Path, err)
		}
		p.stage(f.Path, cp)
	}
	return nil
}

func (p *puller) stage(path, file string) {
	p.mu.Lock()
	p.staged[path] = file
	p.mu.Unlock()
}

func (p *puller) track(file string) {
	p.mu.Lock()
	p.created = append(p.created, file)
	p.mu.Unlock()
}

func (p *puller) copyFile(from, to string) error {
	p.track(to)
	return atomicfile.Copy(from, to, 0o600)
}

// fetchBlob brings layer l into .kiln-partial verified (blob.Dir: the
// partial <hex>.part, resumed by Range after an interruption, in parallel
// WriteAt chunks when large, renamed to <hex> once its size and sha256
// check) and returns where it lies.
func (p *puller) fetchBlob(ctx context.Context, l Layer) (string, error) {
	d, err := v1.NewHash(l.Digest)
	if err != nil {
		return "", err
	}
	dir := blob.Dir{Root: p.partial(""), Partial: p.partial(""), Suffix: ".part", Sync: p.opts.sync, Staging: true}
	progress := p.opts.Progress
	if p.opts.BlobProgress != nil {
		if c := p.opts.BlobProgress(l.Digest, l.Size); c != nil {
			progress = c
		}
	}
	open := func(ctx context.Context) (blob.Writer, error) {
		w, err := dir.Writer(ctx, d, l.Size)
		if err != nil {
			return nil, err
		}
		if w.Created() {
			p.track(w.PartialPath())
			p.track(w.PartialPath() + blob.RangesSuffix)
		}
		return w, nil
	}
	// Copy counts the bytes an earlier run left in progress, as it opens.
	res, err := blob.Copy(ctx, open, p.src, d, l.Size, blob.CopyOptions{
		Attempts: p.opts.Attempts,
		Fill:     blob.FillOptions{Chunk: p.opts.ChunkSize, Acquire: p.acquire, Conns: p.opts.Concurrency, Fetched: &p.fetched},
		Limit:    p.limit, Progress: progress,
	})
	p.resumed.Add(res.Resumed)
	if err != nil {
		switch {
		case blob.IsNoSpace(err) || ctx.Err() != nil:
			return "", err
		case registry.IsIntegrityError(err):
			return "", fmt.Errorf("%w: %v; the partial download was discarded", ErrCorrupt, err)
		}
		return "", fmt.Errorf("%w (kept in %s to resume)", err, PartialDir)
	}
	if !res.Exists {
		p.track(dir.Path(d))
	}
	return dir.Path(d), nil
}

// fetchTar stages the files of a packed layer: the blob is verified whole,
// then each entry is checked against the manifest (a regular file, a safe
// path, listed for this layer, once, with the listed size and sha256)
// before it is staged.
func (p *puller) fetchTar(ctx context.Context, l Layer, files []File) error {
	part, err := p.fetchBlob(ctx, l)
	if err != nil {
		return err
	}
	inLayer := map[string]File{}
	for _, f := range p.m.Files {
		if f.Layer == l.Digest {
			inLayer[f.Path] = f
		}
	}
	want := map[string]int{}
	for i, f := range files {
		want[f.Path] = i
	}
	bf, err := os.Open(part)
	if err != nil {
		return err
	}
	defer bf.Close()
	seen := map[string]bool{}
	tr := tar.NewReader(bf)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("layer %s: broken tar: %v", l.Digest, err)
		}
		if err := CheckPath(hdr.Name); err != nil {
			return fmt.Errorf("layer %s: hostile tar entry: %v", l.Digest, err)
		}
		if hdr.Typeflag != tar.TypeReg {
			return fmt.Errorf("layer %s: entry %q is of tar type %q; weights layers hold regular files only", l.Digest, hdr.Name, hdr.Typeflag)
		}
		mf, ok := inLayer[hdr.Name]
		if !ok {
			return fmt.Errorf("layer %s: entry %q is not in the volume manifest for this layer", l.Digest, hdr.Name)
		}
		if seen[hdr.Name] {
			return fmt.Errorf("layer %s: entry %q appears twice", l.Digest, hdr.Name)
		}
		seen[hdr.Name] = true
		if hdr.Size != mf.Size {
			return fmt.Errorf("layer %s: entry %q has %d bytes, the manifest says %d", l.Digest, hdr.Name, hdr.Size, mf.Size)
		}
		i, needed := want[hdr.Name]
		if !needed {
			continue
		}
		dst := p.partial(fmt.Sprintf("%s.%d.file", mf.SHA256, i))
		// The copy stops with ctx (a sparse entry yields its zeros
		// without reading the blob).
		if err := p.stageEntry(layers.ContextReader(ctx, tr, nil), mf, dst); err != nil {
			return fmt.Errorf("layer %s: entry %q: %w", l.Digest, hdr.Name, err)
		}
		p.stage(mf.Path, dst)
	}
	for _, f := range files {
		if !seen[f.Path] {
			return fmt.Errorf("layer %s: the manifest puts %q in it, but the tar lacks it", l.Digest, f.Path)
		}
	}
	bf.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	return os.Remove(part)
}

func (p *puller) stageEntry(r io.Reader, f File, dst string) error {
	p.track(dst)
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	h := sha256.New()
	if _, err := io.Copy(io.MultiWriter(out, h), r); err != nil {
		out.Close()
		return err
	}
	if err := out.Sync(); err != nil {
		out.Close()
		return err
	}
	if err := out.Close(); err != nil {
		return err
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != f.SHA256 {
		os.Remove(dst)
		return fmt.Errorf("%w: hashes to %s, the manifest says %s", ErrCorrupt, got, f.SHA256)
	}
	return nil
}

// commit moves every staged file into place and writes the marker last.
// The old marker goes first: between the two the volume is not ready.
func (p *puller) commit() error {
	for _, name := range []string{ReadyMarker, ManifestFile} {
		if err := os.Remove(filepath.Join(p.dir, name)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	paths := make([]string, 0, len(p.staged))
	for k := range p.staged {
		paths = append(paths, k)
	}
	sort.Strings(paths)
	modes := map[string]uint32{}
	for _, f := range p.m.Files {
		modes[f.Path] = f.Mode
	}
	dirs := map[string]bool{p.dir: true, p.root: true}
	for _, rel := range paths {
		if d := path.Dir(rel); d != "." {
			if err := mkdirSafe(p.root, d); err != nil {
				return err
			}
		}
		// Check again right before the rename: nothing may have put a
		// link in the way since plan().
		target, err := safeTarget(p.root, rel)
		if err != nil {
			return err
		}
		staged := p.staged[rel]
		if err := os.Chmod(staged, os.FileMode(modes[rel])); err != nil {
			return err
		}
		if err := os.Rename(staged, target); err != nil {
			return fmt.Errorf("%s: %v", rel, err)
		}
		dirs[filepath.Dir(target)] = true
	}
	for d := range dirs {
		atomicfile.SyncDir(d)
	}
	os.RemoveAll(filepath.Join(p.dir, PartialDir))
	mb, err := p.m.Encode()
	if err != nil {
		return err
	}
	if err := atomicfile.WriteFile(filepath.Join(p.dir, ManifestFile), mb, 0o644); err != nil {
		return err
	}
	if err := atomicfile.WriteFile(filepath.Join(p.dir, ReadyMarker), []byte(p.m.SetDigest+"\n"), 0o644); err != nil {
		return err
	}
	atomicfile.SyncDir(p.dir)
	return nil
}

// cleanRun removes what this run added to .kiln-partial, after a full disk:
// holding space helps nobody, and the volume is left as it was.
func (p *puller) cleanRun() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, f := range p.created {
		os.Remove(f)
	}
	os.Remove(filepath.Join(p.dir, PartialDir)) // only if empty
}

// safeTarget joins rel to dir after checking each existing component with
// Lstat: a symlink anywhere below dir, or a file where a directory must be,
// is refused rather than followed.
func safeTarget(dir, rel string) (string, error) {
	if err := CheckPath(rel); err != nil {
		return "", err
	}
	parts := strings.Split(rel, "/")
	cur := dir
	for i, c := range parts {
		cur = filepath.Join(cur, c)
		fi, err := os.Lstat(cur)
		if errors.Is(err, os.ErrNotExist) {
			return filepath.Join(dir, filepath.FromSlash(rel)), nil
		}
		if err != nil {
			return "", err
		}
		last := i == len(parts)-1
		switch {
		case fi.Mode()&os.ModeSymlink != 0:
			return "", fmt.Errorf("%s: %s is a symlink; kiln does not follow links inside a volume", rel, cur)
		case !last && !fi.IsDir():
			return "", fmt.Errorf("%s: %s is not a directory", rel, cur)
		case last && !fi.Mode().IsRegular():
			return "", fmt.Errorf("%s: %s exists and is not a regular file", rel, cur)
		}
	}
	return cur, nil
}

// mkdirSafe creates dir/rel one component at a time, refusing links.
func mkdirSafe(dir, rel string) error {
	cur := dir
	for _, c := range strings.Split(rel, "/") {
		cur = filepath.Join(cur, c)
		fi, err := os.Lstat(cur)
		if errors.Is(err, os.ErrNotExist) {
			if err := os.Mkdir(cur, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
				return err
			}
			if fi, err = os.Lstat(cur); err != nil {
				return err
			}
		} else if err != nil {
			return err
		}
		if fi.Mode()&os.ModeSymlink != 0 || !fi.IsDir() {
			return fmt.Errorf("%s: %s is not a directory (symlinks are not followed)", rel, cur)
		}
	}
	return nil
}

// present reports whether target already holds f's bytes; a wrong mode is
// fixed in place.
func present(target string, f File) (bool, error) {
	fi, err := os.Lstat(target)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if !fi.Mode().IsRegular() || fi.Size() != f.Size {
		return false, nil
	}
	h, err := blob.FileDigest(target)
	sum := h.Hex
	if err != nil {
		return false, err
	}
	if sum != f.SHA256 {
		return false, nil
	}
	if uint32(fi.Mode().Perm()) != f.Mode {
		if err := os.Chmod(target, os.FileMode(f.Mode)); err != nil {
			return false, err
		}
	}
	return true, nil
}

// hashPresent hashes the files of m in root, jobs at once, and returns
// those whose sha256 is right (the cheap check already passed their
// size, mode and type). Progress counts the bytes of the good ones.
func hashPresent(ctx context.Context, root string, m *Manifest, jobs int, progress *atomic.Int64) (map[string]bool, error) {
	var mu sync.Mutex
	good := map[string]bool{}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(jobs)
	for _, f := range m.Files {
		g.Go(func() error {
			if err := gctx.Err(); err != nil {
				return err
			}
			target, err := safeTarget(root, f.Path)
			if err != nil {
				return err
			}
			h, err := blob.FileDigest(target)
			if err != nil {
				return err
			}
			if h.Hex != f.SHA256 {
				return nil
			}
			if progress != nil {
				progress.Add(f.Size)
			}
			mu.Lock()
			good[f.Path] = true
			mu.Unlock()
			return nil
		})
	}
	return good, g.Wait()
}
