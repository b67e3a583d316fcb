package builder

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	gateway "github.com/moby/buildkit/frontend/gateway/client"

	"github.com/kiln-build/kiln/builder/wheelcache"
	"github.com/kiln-build/kiln/internal/atomicfile"
	"github.com/kiln-build/kiln/internal/bytesize"
	"github.com/kiln-build/kiln/recipes"
	"github.com/kiln-build/kiln/recipes/wheelindex"
	"github.com/kiln-build/kiln/recipes/wheelkey"
)

// WheelCache is a build's wheel cache (kiln build --wheel-cache): the
// wheels the graph compiles are looked up before the solve, fetched and
// copied in instead of compiled on a hit, and pushed after they compile.
type WheelCache struct {
	Cache *wheelcache.Cache
	// Index reads the source archives' sha256 from the package index
	// (nil: a plain client).
	Index *wheelindex.Client
	// Keys are keys computed already (the lock's): a wheel of the same
	// project and platform uses its key as is, without asking the index.
	Keys []wheelkey.Key
	// Locked (kiln build --locked) pins the cache to the lock: a cached
	// wheel is used only when Pinned names its key digest with the wheel's
	// sha256 (what kiln lock found in the cache); any other hit — a wheel
	// pushed after the lock, by anyone who can push to the cache, or a
	// mirror's other bytes — is compiled instead (N4).
	Locked bool
	Pinned map[string]string // key digest → the wheel's sha256 (hex)
	// Verify, when set, refuses a cached wheel whose artifact no trusted
	// key signed (kiln build --wheel-cache-verify-key): it is compiled
	// instead. Sign, when set, signs each wheel the build pushes (kiln
	// build --sign-key), so that the cache is as trustworthy as a signed
	// image.
	Verify func(ctx context.Context, e *wheelcache.Entry) error
	Sign   func(ctx context.Context, e *wheelcache.Entry) error
	// Log gets a line per wheel before the solve (nil: none).
	Log io.Writer
}

// WheelUse is what the wheel cache did for one wheel the recipe compiles.
type WheelUse struct {
	Package   string       `json:"package"`
	Platform  string       `json:"platform"`
	Key       wheelkey.Key `json:"key"`
	KeyDigest string       `json:"key_digest"`
	// Cached: fetched and verified from the cache; its compile step did
	// not run. Otherwise it compiled (Pushed when it went to the cache).
	Cached   bool   `json:"cached"`
	Pushed   bool   `json:"pushed"`
	Wider    bool   `json:"wider,omitempty"` // a wheel for more GPU architectures than asked
	Ref      string `json:"ref,omitempty"`
	Filename string `json:"filename,omitempty"`
	Digest   string `json:"digest,omitempty"`
	Size     int64  `json:"size,omitempty"`
	Note     string `json:"note,omitempty"` // why the cache was not used, or a push failed
}

// WheelKeys are the cache keys of the wheels plan compiles from source,
// one per platform (os/arch) and project: FlashAttention's build: source
// and the recipe's pip_from_source requirements. The source archive's
// sha256 comes from the index pip fetches it from.
func WheelKeys(ctx context.Context, p *recipes.Plan, platforms []string, idx *wheelindex.Client) ([]wheelkey.Key, error) {
	var keys []wheelkey.Key
	for _, pp := range p.Compiled() {
		k, err := compiledKey(ctx, p, pp, idx)
		if err != nil {
			return nil, err
		}
		for _, pl := range buildPlatforms(p, platforms) {
			kk := k
			kk.Platform = pl
			keys = append(keys, kk.Normalize())
		}
	}
	return keys, nil
}

// compiledKey is pp's key but the platform.
func compiledKey(ctx context.Context, p *recipes.Plan, pp recipes.PipPackage, idx *wheelindex.Client) (wheelkey.Key, error) {
	version, ok := pp.Version()
	if pp.Name == "flash-attn" && p.FlashAttn != nil {
		version, ok = *p.FlashAttn, true
	}
	if !ok {
		return wheelkey.Key{}, fmt.Errorf("%s is not pinned with ==: a compiled wheel is keyed by its version", pp.Requirement)
	}
	src, err := sourceDigest(ctx, idx, &pp, version)
	if err != nil {
		return wheelkey.Key{}, err
	}
	k := wheelkey.Key{
		Package: pp.Name, Version: version, Source: src,
		CUDA: p.CUDA, Python: p.Python, PythonABI: "cp" + strings.ReplaceAll(p.Python, ".", ""),
		Builder: p.OS,
	}
	if p.Torch != nil {
		k.Torch = *p.Torch
	}
	if p.TorchCUDAVariant != nil {
		k.TorchCUDA = *p.TorchCUDAVariant
	}
	if p.TorchCXX11ABI != nil {
		k.CXX11ABI = "0"
		if *p.TorchCXX11ABI {
			k.CXX11ABI = "1"
		}
	}
	if fab := p.FlashAttnBuild; pp.Name == "flash-attn" && fab != nil {
		k.Archs = strings.Split(fab.CUDAArchs, ";")
		// What changes the bytes: the environment but the parallelism
		// (and the architectures, Archs), and pip's flags.
		for _, e := range flashAttnEnv(fab) {
			if !strings.HasPrefix(e, "MAX_JOBS=") && !strings.HasPrefix(e, "NVCC_THREADS=") && !strings.HasPrefix(e, "FLASH_ATTN_CUDA_ARCHS=") {
				k.Flags = append(k.Flags, e)
			}
		}
		for _, f := range fab.PipFlags {
			k.Flags = append(k.Flags, "pip:"+f)
		}
		return k, nil
	}
	// A pip_from_source requirement: compiled for the plan's
	// architectures (TORCH_CUDA_ARCH_LIST), or torch's own default list
	// when the recipe names no GPUs.
	k.Archs = p.CUDAArchs
	if len(k.Archs) == 0 {
		k.Archs = []string{DefaultArchs}
	}
	for _, e := range sourceEnv(p) {
		if !strings.HasPrefix(e, "TORCH_CUDA_ARCH_LIST=") {
			k.Flags = append(k.Flags, e)
		}
	}
	k.Flags = append(k.Flags, "pip:--no-build-isolation", "pip:--no-binary")
	return k, nil
}

// DefaultArchs stands in a wheel key's architecture list for a compile
// that sets none (a recipe without gpus): the extension builder's own
// default.
const DefaultArchs = "default"

// sourceDigest is the sha256 the index lists for pkg's source archive
// of version: what pip wheel --no-binary compiles.
func sourceDigest(ctx context.Context, idx *wheelindex.Client, pkg *recipes.PipPackage, version string) (string, error) {
	if idx == nil {
		idx = &wheelindex.Client{Setting: recipes.WheelIndexSetting}
	}
	index := pkg.IndexURL
	if index == "" {
		index = recipes.PyPIIndexURL
	}
	files, err := idx.Files(ctx, index, pkg.Name)
	if err != nil {
		return "", err
	}
	f, ok := wheelindex.SourceArchive(files, pkg.Name, version)
	if ok && f.SHA256 == "" {
		return "", fmt.Errorf("%s lists %s without a sha256: the wheel cache keys a compiled wheel by its source's digest", index, f.Filename)
	}
	if ok {
		return "sha256:" + f.SHA256, nil
	}
	return "", fmt.Errorf("%s lists no source archive (.tar.gz) of %s %s", index, pkg.Name, version)
}

// buildPlatforms are the platforms a build makes: platforms, else the
// plan's, else linux/amd64.
func buildPlatforms(p *recipes.Plan, platforms []string) []string {
	if len(platforms) == 0 {
		platforms = p.Platforms
	}
	if len(platforms) == 0 {
		platforms = []string{"linux/amd64"}
	}
	return platforms
}

// wheelRun is one build's use of the wheel cache.
type wheelRun struct {
	wc   *WheelCache
	dir  string // fetched and exported wheels
	keys map[WheelSlot]wheelkey.Key
	uses []*WheelUse
}

// keyed says whether k is the key of u's wheel.
func (u *WheelUse) keyed(k wheelkey.Key) bool {
	return k.Platform == u.Platform && wheelkey.NormalizeName(k.Package) == wheelkey.NormalizeName(u.Package)
}

func (r *wheelRun) use(s WheelSlot) *WheelUse {
	for _, u := range r.uses {
		if u.Platform == s.Platform && u.Package == s.Package {
			return u
		}
	}
	return nil
}

func (r *wheelRun) logf(format string, a ...any) {
	if r.wc.Log != nil {
		fmt.Fprintf(r.wc.Log, "kiln: wheel cache "+format+"\n", a...)
	}
}

// prepareWheels looks up each wheel the plan compiles and fetches the
// ones the cache has into a directory, recording them in in.CachedWheels
// (their compile steps become copies). A wheel that cannot be keyed,
// found or verified is compiled; nothing here fails the build.
func prepareWheels(ctx context.Context, p *recipes.Plan, in *Inputs, wc *WheelCache, platforms []string) (*wheelRun, func(), error) {
	nop := func() {}
	compiled := p.Compiled()
	if wc == nil || wc.Cache == nil || len(compiled) == 0 {
		return nil, nop, nil
	}
	dir, err := os.MkdirTemp("", "kiln-wheels-*")
	if err != nil {
		return nil, nop, err
	}
	cleanup := func() { os.RemoveAll(dir) }
	r := &wheelRun{wc: wc, dir: dir, keys: map[WheelSlot]wheelkey.Key{}}
	for _, pl := range buildPlatforms(p, platforms) {
		for _, pp := range compiled {
			r.uses = append(r.uses, &WheelUse{Package: pp.Name, Platform: pl})
		}
	}
	keys := slices.Clone(wc.Keys)
	missing := false
	for _, u := range r.uses {
		if !slices.ContainsFunc(keys, u.keyed) {
			missing = true
		}
	}
	if missing {
		ks, err := WheelKeys(ctx, p, platforms, wc.Index)
		if err != nil {
			for _, u := range r.uses {
				u.Note = "not cached: " + err.Error()
			}
			r.logf("not used: the wheels are compiled: %v", err)
			return r, cleanup, nil
		}
		keys = append(keys, ks...)
	}
	if in.CachedWheels == nil {
		in.CachedWheels = map[WheelSlot]string{}
	}
	for _, u := range r.uses {
		i := slices.IndexFunc(keys, u.keyed)
		k := keys[i].Normalize()
		slot := WheelSlot{u.Platform, u.Package}
		r.keys[slot] = k
		// The compile (a miss, or a refused hit) builds from the source
		// archive the key names, or pip fails: never a wheel pushed under
		// a key whose source it was not built from.
		if h, ok := strings.CutPrefix(k.Source, "sha256:"); ok && h != "" {
			if in.SourceHashes == nil {
				in.SourceHashes = map[string]string{}
			}
			in.SourceHashes[u.Package] = h
		}
		u.Key, u.KeyDigest = k, k.Digest()
		e, err := wc.Cache.Lookup(ctx, k)
		if err != nil {
			u.Note = "lookup failed, compiling: " + err.Error()
			r.logf("lookup failed: %s (%s) is compiled: %v", u.Package, u.Platform, err)
			continue
		}
		if e == nil {
			u.Note = "not in the cache: compiling, then pushing to " + wc.Cache.Repo()
			r.logf("miss: %s (%s), key %s: compiling", u.Package, u.Platform, shortKey(k))
			continue
		}
		why := wc.pinRefuses(k, e)
		if why == "" && wc.Verify != nil {
			if err := wc.Verify(ctx, e); err != nil {
				why = err.Error()
			}
		}
		if why != "" {
			u.Note = "cached wheel refused, compiling: " + why
			r.logf("refused: %s (%s) is compiled instead: %s", u.Package, u.Platform, why)
			continue
		}
		if _, err := wc.Cache.Fetch(ctx, e, dir); err != nil {
			u.Note = "cached wheel refused, compiling: " + err.Error()
			r.logf("refused: %s (%s) is compiled instead: %v", u.Package, u.Platform, err)
			continue
		}
		in.CachedWheels[slot] = e.Filename
		if in.CachedWheelDigests == nil {
			in.CachedWheelDigests = map[WheelSlot]string{}
		}
		in.CachedWheelDigests[slot] = e.Filename + "@" + e.Digest.String()
		u.Cached, u.Wider, u.Ref, u.Filename, u.Digest, u.Size = true, e.Wider, e.Ref.String(), e.Filename, e.Digest.String(), e.Size
		r.logf("hit: %s (%s), %s verified: not compiled", u.Package, u.Platform, bytesize.Format(e.Size))
		if e.Wider {
			u.Note = fmt.Sprintf("a wheel for GPU architectures %s, wider than the %s asked for (allow_wider_archs): correct, and larger", strings.Join(e.Key.Archs, ";"), strings.Join(k.Archs, ";"))
			fmt.Fprintf(r.wc.Log, "  a wheel for GPU architectures %s, wider than the %s asked for\n  (allow_wider_archs): correct, and larger\n", strings.Join(e.Key.Archs, ";"), strings.Join(k.Archs, ";"))
		}
	}
	return r, cleanup, nil
}

// pinRefuses says why --locked does not take cached wheel e for key k
// ("" when it does, or without --locked).
func (wc *WheelCache) pinRefuses(k wheelkey.Key, e *wheelcache.Entry) string {
	if !wc.Locked {
		return ""
	}
	want, ok := wc.Pinned[k.Digest()]
	switch {
	case !ok:
		return "--locked: the lock records no cached wheel for this key (run kiln lock to pin the one the cache holds)"
	case want != e.Digest.Hex:
		return fmt.Sprintf("--locked: %s has sha256 %s, the lock pins %s", e.Ref, e.Digest.Hex, want)
	}
	return ""
}

func shortKey(k wheelkey.Key) string { return strings.TrimPrefix(k.Digest(), "sha256:")[:12] }

// hasCached says whether a wheel was fetched (the WheelsName context is
// needed).
func (r *wheelRun) hasCached() bool {
	return r != nil && slices.ContainsFunc(r.uses, func(u *WheelUse) bool { return u.Cached })
}

// pushCompiled exports each wheel g compiled from the solved graph and
// pushes it to the cache. A failed push is noted, not fatal: the image
// is good.
func (r *wheelRun) pushCompiled(ctx context.Context, c gateway.Client, g *Graph) error {
	if r == nil {
		return nil
	}
	pl := PlatformString(g.Platform)
	for _, cw := range g.Compiled {
		slot := WheelSlot{pl, cw.Package}
		u := r.use(slot)
		k, ok := r.keys[slot]
		if u == nil || !ok {
			continue
		}
		path, err := r.export(ctx, c, g, cw)
		if err == nil {
			var e *wheelcache.Entry
			if e, err = r.wc.Cache.Push(ctx, k, path); err == nil {
				u.Pushed, u.Ref, u.Filename, u.Digest, u.Size, u.Note = true, e.Ref.String(), e.Filename, e.Digest.String(), e.Size, ""
				if r.wc.Sign != nil {
					if serr := r.wc.Sign(ctx, e); serr != nil {
						u.Note = "pushed, but not signed: " + serr.Error()
					}
				}
				continue
			}
		}
		u.Note = "compiled, but not pushed to the wheel cache: " + err.Error()
	}
	return nil
}

// exportChunk is how much of a wheel one read from BuildKit asks for.
const exportChunk = 4 << 20

// export solves cw's state and copies its one wheel file into r.dir, in
// chunks (a wheel may be hundreds of MB).
func (r *wheelRun) export(ctx context.Context, c gateway.Client, g *Graph, cw CompiledWheel) (string, error) {
	def, err := g.Marshal(ctx, cw.State)
	if err != nil {
		return "", err
	}
	res, err := c.Solve(ctx, gateway.SolveRequest{Definition: def.ToPB(), Evaluate: true})
	if err != nil {
		return "", err
	}
	ref, err := res.SingleRef()
	if err != nil {
		return "", err
	}
	ents, err := ref.ReadDir(ctx, gateway.ReadDirRequest{Path: "/", IncludePattern: "*.whl"})
	if err != nil {
		return "", err
	}
	if len(ents) != 1 {
		return "", fmt.Errorf("the compile step left %d wheels, want 1", len(ents))
	}
	name, size := filepath.Base(ents[0].Path), ents[0].Size
	dir := filepath.Join(r.dir, "compiled", g.Platform.OS+"-"+g.Platform.Architecture+g.Platform.Variant)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	dst := filepath.Join(dir, name)
	f, err := atomicfile.Create(dst, 0o644)
	if err != nil {
		return "", err
	}
	for off := int64(0); off < size; {
		n := min(exportChunk, size-off)
		b, err := ref.ReadFile(ctx, gateway.ReadRequest{Filename: "/" + name, Range: &gateway.FileRange{Offset: int(off), Length: int(n)}})
		if err == nil && int64(len(b)) != n {
			err = fmt.Errorf("reading %s from the build: %d bytes at %d, want %d", name, len(b), off, n)
		}
		if err == nil {
			_, err = f.Write(b)
		}
		if err != nil {
			f.Abort()
			return "", err
		}
		off += n
	}
	if err := f.Commit(); err != nil {
		return "", err
	}
	return dst, nil
}

// PinLock pins the cache to lock (kiln build --locked): the lock's keys
// are used as they are, and a cached wheel only when the lock pins it.
func (wc *WheelCache) PinLock(l *recipes.Lock) {
	wc.Locked, wc.Pinned = true, map[string]string{}
	for _, w := range l.CompiledWheels {
		wc.Keys = append(wc.Keys, w.Key)
		if w.Cached && w.SHA256 != "" {
			wc.Pinned[w.Key.Digest()] = w.SHA256
		}
	}
}
