package recipes

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"sort"
	"strings"

	"github.com/kiln-build/kiln/internal/atomicfile"
	"github.com/kiln-build/kiln/internal/localfile"
	"github.com/kiln-build/kiln/recipes/wheelindex"
	"github.com/kiln-build/kiln/recipes/wheelkey"
)

// LockVersion is the kiln.lock format version.
const LockVersion = 1

// LockFile is the default lock file name, next to the recipe.
const LockFile = "kiln.lock"

// Lock pins a resolved recipe: base image digests per platform and wheel
// URLs with sha256, so a later build needs no look-ups.
type Lock struct {
	LockVersion int                    `json:"lock_version"`
	DataVersion string                 `json:"data_version"`
	Recipe      string                 `json:"recipe"`
	RecipeHash  string                 `json:"recipe_sha256"`
	Plan        *Plan                  `json:"plan"`
	BaseImages  map[string]LockedImage `json:"base_images"` // "devel", "runtime"
	Wheels      []LockedWheel          `json:"wheels"`
	// CompiledWheels are the wheels the build compiles from source, with
	// their wheel cache keys and whether the cache had them when the lock
	// was made (kiln lock with a wheel cache).
	CompiledWheels []LockedCompiledWheel `json:"compiled_wheels,omitempty"`
	Warnings       []string              `json:"warnings"`
	// FileDigest is the sha256 of the file ReadLock read (sha256:HEX),
	// which a build records as its lock digest; empty for a lock that
	// was not read from a file.
	FileDigest string `json:"-"`
}

// LockedCompiledWheel is a wheel kiln compiles from source, keyed for the
// wheel cache.
type LockedCompiledWheel struct {
	Name     string       `json:"name"`
	Version  string       `json:"version"`
	Platform string       `json:"platform"`
	Key      wheelkey.Key `json:"key"`
	// KeyDigest is Key.Digest: the artifact's tag ends with its hex.
	KeyDigest string `json:"key_digest"`
	// Cache is the repository looked in; Cached says it held the wheel
	// (Ref, SHA256, Size then name it), so a build fetches it instead of
	// compiling. Wider: a wheel for more GPU architectures (allowed).
	Cache    string `json:"cache,omitempty"`
	Cached   bool   `json:"cached"`
	Wider    bool   `json:"wider,omitempty"`
	Ref      string `json:"ref,omitempty"`
	Filename string `json:"filename,omitempty"`
	SHA256   string `json:"sha256,omitempty"`
	Size     int64  `json:"size,omitempty"`
}

// LockedImage is a base image pinned by digest.
type LockedImage struct {
	Ref       string            `json:"ref"`
	Digest    string            `json:"digest"`    // what ref names: an index or a manifest
	Platforms map[string]string `json:"platforms"` // linux/amd64 -> manifest digest
}

// Pinned is ref@digest (the tag dropped).
func (li LockedImage) Pinned() string {
	repo := li.Ref
	if i := strings.LastIndex(repo, "@"); i >= 0 {
		repo = repo[:i]
	}
	if i := strings.LastIndex(repo, ":"); i > strings.LastIndex(repo, "/") {
		repo = repo[:i]
	}
	return repo + "@" + li.Digest
}

// LockedWheel is one wheel for one platform.
type LockedWheel struct {
	Name     string `json:"name"`
	Version  string `json:"version"`
	Platform string `json:"platform"`
	Filename string `json:"filename"`
	URL      string `json:"url"`
	SHA256   string `json:"sha256"`
	Index    string `json:"index,omitempty"`
}

// DigestResolver resolves an image reference to the digest it names and the
// manifest digest per platform ("linux/amd64" -> "sha256:..."); the cmd
// implements it with layers.PlatformDigests.
type DigestResolver interface {
	PlatformDigests(ctx context.Context, ref string) (index string, perPlatform map[string]string, err error)
}

// DigestResolverFunc adapts a function to DigestResolver.
type DigestResolverFunc func(ctx context.Context, ref string) (string, map[string]string, error)

// PlatformDigests calls f.
func (f DigestResolverFunc) PlatformDigests(ctx context.Context, ref string) (string, map[string]string, error) {
	return f(ctx, ref)
}

// LockOptions are the network clients a lock uses.
type LockOptions struct {
	Digests DigestResolver
	Index   *wheelindex.Client
	// HTTP downloads wheels that are not on an index (FlashAttention release
	// assets) to hash them; nil means http.DefaultClient.
	HTTP *http.Client
}

// NewLock resolves base image digests and wheel hashes for plan.
func NewLock(ctx context.Context, r *Recipe, plan *Plan, o LockOptions) (*Lock, error) {
	l := &Lock{LockVersion: LockVersion, DataVersion: plan.DataVersion, Recipe: filepath.Base(r.Path()), RecipeHash: r.Hash(), Plan: plan, BaseImages: map[string]LockedImage{}, Wheels: []LockedWheel{}, Warnings: []string{}}
	if o.Digests == nil {
		return nil, fmt.Errorf("lock: no digest resolver")
	}
	for _, kind := range []string{"devel", "runtime"} {
		ref := plan.BaseImages.Devel
		if kind == "runtime" {
			ref = plan.BaseImages.Runtime
		}
		idx, per, err := o.Digests.PlatformDigests(ctx, ref)
		if err != nil {
			if strings.Contains(err.Error(), ref) { // the registry's error names it
				return nil, fmt.Errorf("lock: the %s base image: %w", kind, err)
			}
			return nil, fmt.Errorf("lock: the %s base image %s: %w", kind, ref, err)
		}
		li := LockedImage{Ref: ref, Digest: idx, Platforms: map[string]string{}}
		for _, p := range plan.Platforms {
			d, ok := per[p]
			if !ok {
				return nil, fmt.Errorf("lock: base image %s has no %s manifest (has %s)", ref, p, keys(per))
			}
			li.Platforms[p] = d
		}
		l.BaseImages[kind] = li
	}
	files := map[string][]wheelindex.File{}
	list := func(index, project string) ([]wheelindex.File, error) {
		k := index + "\x00" + wheelindex.Normalize(project)
		if f, ok := files[k]; ok {
			return f, nil
		}
		f, err := o.Index.Files(ctx, index, project)
		if err != nil {
			return nil, err
		}
		files[k] = f
		return f, nil
	}
	for _, plat := range plan.Platforms {
		for _, pp := range plan.Pip {
			name, version, ok := pinned(pp.Requirement)
			if !ok {
				l.Warnings = append(l.Warnings, fmt.Sprintf("%s is not pinned with ==; it is not locked", pp.Requirement))
				continue
			}
			if pp.FromSource() {
				// compiled_wheels records its key (the source's sha256
				// among it); the build compiles it or fetches the wheel.
				continue
			}
			if pp.Name == "flash-attn" && plan.FlashAttnBuild != nil {
				l.Warnings = append(l.Warnings, fmt.Sprintf("flash-attn %s is built from source; no wheel is locked", version))
				continue
			}
			if pp.URL != "" && pp.IndexURL == "" {
				w, err := hashURL(ctx, o.HTTP, pp.URL)
				if err != nil {
					return nil, fmt.Errorf("lock: %s: %w", pp.Name, err)
				}
				w.Name, w.Version, w.Platform, w.Filename = name, version, plat, pp.Wheel
				l.Wheels = append(l.Wheels, w)
				continue
			}
			index := pp.IndexURL
			if index == "" {
				index = PyPIIndexURL
			}
			fs, err := list(index, name)
			if err != nil {
				return nil, fmt.Errorf("lock: %w", err)
			}
			f, err := wheelindex.Select(fs, name, version, plan.Python, plat, pp.Wheel)
			if err != nil {
				if src, ok := wheelindex.SourceArchive(fs, name, version); ok {
					return nil, fmt.Errorf("lock: %s: %w, only its source archive %s: add `pip_from_source: [%s]` to %s and kiln compiles it in the devel stage (with a wheel cache, once)", index, err, src.Filename, name, recipeName(l.Recipe))
				}
				return nil, fmt.Errorf("lock: %s: %w", index, err)
			}
			if f.SHA256 == "" {
				return nil, fmt.Errorf("lock: %s lists %s without a sha256", index, f.Filename)
			}
			w, _ := wheelindex.ParseWheel(f.Filename)
			l.Wheels = append(l.Wheels, LockedWheel{Name: name, Version: w.Version, Platform: plat, Filename: f.Filename, URL: f.URL, SHA256: f.SHA256, Index: index})
		}
	}
	return l, nil
}

func keys(m map[string]string) string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, ", ")
}

// isPinned says whether req is "name==version".
func isPinned(req string) bool { _, _, ok := pinned(req); return ok }

// pinned splits "name==version".
func pinned(req string) (string, string, bool) {
	name, ver, ok := strings.Cut(req, "==")
	name, ver = strings.TrimSpace(name), strings.TrimSpace(ver)
	if !ok || name == "" || ver == "" || strings.ContainsAny(ver, ",;<>=!~ ") || strings.Contains(name, "[") {
		return "", "", false
	}
	return name, ver, true
}

func hashURL(ctx context.Context, c *http.Client, u string) (LockedWheel, error) {
	if c == nil {
		c = http.DefaultClient
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return LockedWheel{}, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return LockedWheel{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return LockedWheel{}, fmt.Errorf("GET %s: %s (the prebuilt wheel may not exist; set flash_attn.build: source)", u, resp.Status)
	}
	h := sha256.New()
	if _, err := io.Copy(h, resp.Body); err != nil {
		return LockedWheel{}, err
	}
	return LockedWheel{URL: u, SHA256: hex.EncodeToString(h.Sum(nil))}, nil
}

// Marshal renders the lock as indented JSON with a trailing newline.
func (l *Lock) Marshal() ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	if err := enc.Encode(l); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// WriteLock writes l to path atomically (temp file in the same directory,
// fsync, rename, directory fsync).
func WriteLock(path string, l *Lock) error {
	b, err := l.Marshal()
	if err != nil {
		return err
	}
	return atomicfile.WriteFile(path, b, 0o644)
}

// ReadLock reads a kiln.lock.
func ReadLock(path string) (*Lock, error) {
	b, err := localfile.ReadFile(path, "lock", localfile.MaxConfig)
	if err != nil {
		return nil, err
	}
	return DecodeLock(path, b)
}

// DecodeLock is ReadLock of a lock already read (b, from path): a
// command argument localfile.ReadArg found to be a lock.
func DecodeLock(path string, b []byte) (*Lock, error) {
	var l Lock
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&l); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if l.LockVersion != LockVersion {
		return nil, fmt.Errorf("%s: lock_version %d, this kiln reads %d; run kiln lock again", path, l.LockVersion, LockVersion)
	}
	if l.Plan == nil {
		return nil, fmt.Errorf("%s: no plan", path)
	}
	l.FileDigest = fmt.Sprintf("sha256:%x", sha256.Sum256(b))
	return &l, nil
}

// RuntimeRefs returns the images the lock pins for platform (OS/ARCH as
// layers.PlatformString writes it): each base image but the devel one
// (build-only, never run on a GPU host), by its platform manifest digest,
// in name order. path names the lock in errors.
func (l *Lock) RuntimeRefs(path, platform string) ([]string, error) {
	keys := make([]string, 0, len(l.BaseImages))
	for k := range l.BaseImages {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var refs []string
	for _, k := range keys {
		if k == "devel" {
			continue
		}
		li := l.BaseImages[k]
		dg, ok := li.Platforms[platform]
		if !ok {
			return nil, fmt.Errorf("lock file %s: base_images.%s (%s) has no %s manifest (field platforms)", path, k, li.Ref, platform)
		}
		pinned := li.Pinned()
		refs = append(refs, pinned[:strings.LastIndex(pinned, "@")+1]+dg)
	}
	if len(refs) == 0 {
		return nil, fmt.Errorf("lock file %s: no runtime image to warm (field base_images)", path)
	}
	return refs, nil
}

// Stale says why the lock no longer matches the recipe and the plan
// resolved from it now (nil when it is current). Only local data is used.
func (l *Lock) Stale(r *Recipe, plan *Plan) []string {
	var why []string
	if h := r.Hash(); h != l.RecipeHash {
		why = append(why, fmt.Sprintf("the recipe changed (hash %s, lock has %s)", short(h), short(l.RecipeHash)))
	}
	if plan != nil {
		a, _ := json.Marshal(withoutNotes(plan))
		b, _ := json.Marshal(withoutNotes(l.Plan))
		if !bytes.Equal(a, b) {
			why = append(why, "the resolved plan changed ("+diffPlan(l.Plan, plan)+")")
		}
	}
	for _, kind := range []string{"devel", "runtime"} {
		li, ok := l.BaseImages[kind]
		if !ok || li.Digest == "" {
			why = append(why, "no "+kind+" base image digest")
			continue
		}
		if plan != nil {
			ref := plan.BaseImages.Devel
			if kind == "runtime" {
				ref = plan.BaseImages.Runtime
			}
			if li.Ref != ref {
				why = append(why, fmt.Sprintf("%s base image is now %s (lock has %s)", kind, ref, li.Ref))
			}
		}
	}
	return why
}

func withoutNotes(p *Plan) Plan {
	c := *p
	c.Warnings, c.Sources, c.DataVersion, c.Data = nil, nil, "", nil
	return c
}

func diffPlan(old, cur *Plan) string {
	var d []string
	cmp := func(k, a, b string) {
		if a != b {
			d = append(d, fmt.Sprintf("%s %s -> %s", k, a, b))
		}
	}
	s := func(p *string) string {
		if p == nil {
			return "null"
		}
		return *p
	}
	cmp("cuda", old.CUDA, cur.CUDA)
	cmp("python", old.Python, cur.Python)
	cmp("python_source", old.PythonSource, cur.PythonSource)
	if old.PythonDist != nil && cur.PythonDist != nil {
		cmp("python_dist", old.PythonDist.Version+"+"+old.PythonDist.Release, cur.PythonDist.Version+"+"+cur.PythonDist.Release)
	}
	cmp("torch", s(old.Torch), s(cur.Torch))
	cmp("flash_attn", s(old.FlashAttn), s(cur.FlashAttn))
	cmp("bitsandbytes", s(old.BitsAndBytes), s(cur.BitsAndBytes))
	cmp("base_images.devel", old.BaseImages.Devel, cur.BaseImages.Devel)
	if len(d) == 0 {
		return changedFields(old, cur)
	}
	return strings.Join(d, ", ")
}

// changedFields names the plan's JSON fields whose values differ ("other
// fields" told a user nothing to look for).
func changedFields(old, cur *Plan) string {
	var a, b map[string]json.RawMessage
	ao, co := withoutNotes(old), withoutNotes(cur)
	ja, _ := json.Marshal(&ao)
	jb, _ := json.Marshal(&co)
	if json.Unmarshal(ja, &a) != nil || json.Unmarshal(jb, &b) != nil {
		return "other fields"
	}
	var keys []string
	for k, v := range a {
		if !bytes.Equal(v, b[k]) {
			keys = append(keys, k)
		}
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return "other fields"
	}
	sort.Strings(keys)
	return "fields " + strings.Join(keys, ", ")
}

func short(h string) string {
	h = strings.TrimPrefix(h, "sha256:")
	if len(h) > 12 {
		return h[:12]
	}
	return h
}

// LockedPlan returns the lock's plan with base images pinned by digest, for
// builds that must not look anything up (--locked).
func (l *Lock) LockedPlan() *Plan {
	p := *l.Plan
	if li, ok := l.BaseImages["devel"]; ok && li.Digest != "" {
		p.BaseImages.Devel = li.Pinned()
	}
	if li, ok := l.BaseImages["runtime"]; ok && li.Digest != "" {
		p.BaseImages.Runtime = li.Pinned()
	}
	return &p
}

// LockPath is the kiln.lock next to a recipe file.
func LockPath(recipePath string) string {
	return filepath.Join(filepath.Dir(recipePath), LockFile)
}

// recipeName is the recipe's file name for messages ("the recipe" when
// it was not read from a file).
func recipeName(base string) string {
	if base == "" || base == "." || base == "/" {
		return "the recipe"
	}
	return base
}
