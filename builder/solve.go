package builder

import (
	"cmp"
	"context"
	"debug/elf"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/kiln-build/kiln/internal/atomicfile"
	"github.com/kiln-build/kiln/internal/unixsock"
	"github.com/kiln-build/kiln/layers"
	"github.com/kiln-build/kiln/layers/blob"
	"github.com/kiln-build/kiln/recipes"
	"github.com/kiln-build/kiln/registry"
	"github.com/kiln-build/kiln/sbom"
	"github.com/moby/buildkit/client"
	"github.com/moby/buildkit/exporter/containerimage/exptypes"
	"github.com/moby/buildkit/session"
	"github.com/moby/buildkit/session/auth/authprovider"
	"github.com/moby/buildkit/util/entitlements"
	"github.com/tonistiigi/fsutil"
	"golang.org/x/sync/errgroup"

	// connection helpers for docker-container:// and kube-pod:// addresses
	_ "github.com/moby/buildkit/client/connhelper/dockercontainer"
	_ "github.com/moby/buildkit/client/connhelper/kubepod"
)

// DefaultSockets are tried, in order, after $BUILDKIT_HOST.
var DefaultSockets = []string{
	"unix:///run/kiln-buildkit/buildkitd.sock",
	"unix:///run/buildkit/buildkitd.sock",
}

// StartHint says how to get a daemon; it ends every "no daemon" error.
// The builder most users already run comes first: the one 'docker buildx'
// starts (docker buildx create --use, or any buildx build with the
// docker-container driver), then the project's script.
const StartHint = "use the buildx builder most Docker users already run: --builder docker-container://buildx_buildkit_default (the container `docker buildx create --node default --driver docker-container --bootstrap` starts; any buildx_buildkit_* container `docker ps` lists works), or point --builder / $BUILDKIT_HOST at another buildkitd (unix://, tcp://, docker-container://NAME, kube-pod://POD); without Docker: run BuildKit's own daemon as root (`buildkitd` from a release of github.com/moby/buildkit, or your distribution's buildkit package; it listens on /run/buildkit/buildkitd.sock, which kiln tries)"

// TLS configures a tcp:// connection.
type TLS struct {
	ServerName string
	CACert     string
	Cert, Key  string
}

// foreignOwner says who else owns socket p or its directory ("" when
// both are root's or this user's).
func foreignOwner(p string) string {
	for _, f := range []string{p, filepath.Dir(p)} {
		fi, err := os.Lstat(f)
		if err != nil {
			return fmt.Sprintf("%s: %v", f, err)
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok {
			continue
		}
		if st.Uid != 0 && int(st.Uid) != os.Getuid() {
			return fmt.Sprintf("%s belongs to user %d, not to root or you", f, st.Uid)
		}
	}
	return ""
}

// ErrNoDaemon is wrapped by Connect's error when no daemon answers.
var ErrNoDaemon = errors.New("no BuildKit daemon answers")

// Connect opens a client to addr, or when addr is empty to $BUILDKIT_HOST,
// or when that is unset too to the first of DefaultSockets that answers,
// and checks the daemon answers. An address the user named (addr or
// $BUILDKIT_HOST) is used or the error names it: kiln never falls back
// from it to another daemon.
func Connect(ctx context.Context, addr string, tls TLS) (*client.Client, string, error) {
	var cands []string
	named := ""
	switch h := os.Getenv("BUILDKIT_HOST"); {
	case addr != "":
		cands, named = []string{addr}, "--builder "+addr
	case h != "":
		cands, named = []string{h}, "$BUILDKIT_HOST="+h
	default:
		cands = DefaultSockets
	}
	var tried []string
	for _, a := range cands {
		if p, ok := strings.CutPrefix(a, "unix://"); ok {
			if _, err := os.Stat(p); err != nil {
				tried = append(tried, a+" (no socket)")
				continue
			}
			// A socket nobody named is used only when it is root's or this
			// user's (and so is its directory): the build's credentials and
			// sources go to whoever runs that daemon.
			if named == "" {
				if who := foreignOwner(p); who != "" {
					tried = append(tried, fmt.Sprintf("%s (%s; name it with --builder to use it)", a, who))
					continue
				}
			}
			if err := unixsock.Check(ctx, p, unixsock.BuildKit); err != nil {
				tried = append(tried, fmt.Sprintf("%s (%v)", a, err))
				continue
			}
		}
		var opts []client.ClientOpt
		if tls.CACert != "" || tls.ServerName != "" {
			opts = append(opts, client.WithServerConfig(tls.ServerName, tls.CACert))
		}
		if tls.Cert != "" || tls.Key != "" {
			opts = append(opts, client.WithCredentials(tls.Cert, tls.Key))
		}
		c, err := client.New(ctx, a, opts...)
		if err != nil {
			tried = append(tried, fmt.Sprintf("%s (%v)", a, err))
			continue
		}
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, err = c.ListWorkers(pctx)
		cancel()
		if err != nil {
			c.Close()
			tried = append(tried, fmt.Sprintf("%s (%v)", a, shortErr(err)))
			continue
		}
		return c, a, nil
	}
	if named != "" {
		return nil, "", fmt.Errorf("%w at %s: %s (kiln uses the daemon you name or none); %s", ErrNoDaemon, named, strings.Join(tried, ", "), StartHint)
	}
	return nil, "", fmt.Errorf("%w: tried %s; %s", ErrNoDaemon, strings.Join(tried, ", "), StartHint)
}

func shortErr(err error) string {
	s := err.Error()
	if i := strings.Index(s, "\n"); i >= 0 {
		s = s[:i]
	}
	if len(s) > 160 {
		s = s[:160] + "…"
	}
	return s
}

// Options are how a build talks to BuildKit and what it exports.
type Options struct {
	Client      *client.Client
	Platforms   []string // default: the plan's
	ContextDir  string   // the recipe's directory (app files)
	Outputs     []Output
	Compression string // zstd (default), gzip, none
	CacheFrom   []CacheSpec
	CacheTo     []CacheSpec
	Progress    ProgressMode // default auto (ParseProgress reads --progress)
	ProgressOut io.Writer    // default os.Stderr
	NoProbes    bool
	// Insecure registries (plain HTTP) for push; loopback hosts always are.
	Insecure []string
	// Registry is the options kiln's own registry reads after the solve
	// (the pushed digests) go through, e.g. the command's pool
	// (registry.Pooled); nil: WithInsecureRegistries(Insecure...).
	Registry []registry.Option
	// Tools is a statically linked kiln executable, mounted into the steps
	// that prune GPU code (plans with gpu_code); kiln build passes itself.
	Tools string
	// MaxLayerSize caps the bytes a runtime pip layer installs: a
	// component whose wheels install more is split into several install
	// steps, one layer each (SplitWheels), decided from the devel stage's
	// wheelhouse once it is built. 0 keeps one layer per component.
	MaxLayerSize int64
	// Provenance asks BuildKit for a SLSA provenance attestation of the
	// build ("min" or "max"; "" or "none": none). It is stored as BuildKit
	// stores it, in an attestation manifest beside each image in the
	// pushed index, with kiln's parameters (recipe and lock digests, kiln's
	// version, the plan's stack) among the request's arguments. The
	// attestation carries the build's start time and invocation ID, so the
	// index digest differs per build; the image manifests inside it stay
	// the reproducible ones (Pushed.Images).
	Provenance string
	// BuilderID is the provenance's runDetails.builder.id (a URI naming
	// who ran the build, e.g. the CI job's URL); empty leaves it out.
	BuilderID string
	// Params are kiln's build parameters recorded in the provenance
	// (keys without the "kiln:" prefix; values must be secret-free).
	Params map[string]string
	// Attestations are in-toto statements kiln adds beside each image,
	// in the same attestation manifest as BuildKit's provenance (e.g. the
	// SBOM): BuildKit wraps each body as a statement whose subject is the
	// image it exports. They need an index, so they go with Provenance.
	Attestations []Attestation
	// Attest computes attestations from each platform's built image before
	// it is exported (the SBOM from the image's own files); files reads
	// the runtime result through BuildKit's file API. Like Attestations,
	// it needs Provenance.
	Attest func(ctx context.Context, platform string, files sbom.Files) ([]Attestation, error)
	// WheelCache keeps the wheels the build compiles in a registry
	// (nil: none): wheels.go.
	WheelCache *WheelCache
}

// Attestation is one document attested about each built image.
type Attestation struct {
	PredicateType string
	Path          string // the file name in the attestation manifest's layer
	Body          []byte
	SBOM          bool // marked as an SBOM (BuildKit's "reason": sbom)
}

// provenanceAttr is BuildKit's attest:provenance value for mode (min or
// max), or "" for none.
func provenanceAttr(mode, builderID string) (string, error) {
	switch mode {
	case "", "none", "false":
		return "", nil
	case "min", "max":
	default:
		return "", fmt.Errorf("provenance %q: want min, max or none", mode)
	}
	v := "mode=" + mode + ",version=v1"
	if builderID != "" {
		if strings.ContainsAny(builderID, ",=\"") {
			return "", fmt.Errorf("provenance builder id %q: no commas, quotes or '='", builderID)
		}
		v += ",builder-id=" + builderID
	}
	return v, nil
}

// KilnParamsPredicateType is the in-toto predicate type of kiln's build
// parameters (recipe and lock digests, the stack), attested beside
// BuildKit's provenance.
const KilnParamsPredicateType = "https://kiln.dev/attestations/build-parameters/v1"

// Result is what a build produced.
type Result struct {
	Digest      string            // image (or index) digest: the first pushed output's, else the exporter's
	Pushed      []Pushed          // each image output, in Outputs order
	Graph       string            // graph digest (the runtime definition of the first platform)
	Response    map[string]string // the exporter's response
	Status      Stats
	ConfigBytes map[string][]byte // platform -> config JSON
	// Reused says the build was answered from its content tag, the
	// image already built from the same inputs (Content.Reused): nothing
	// was solved. ContentTag and InputsDigest name it.
	Reused       bool
	ContentTag   string
	InputsDigest string
	Wheels       []WheelUse // what the wheel cache did, per compiled wheel
}

// Pushed is an image output and the digest the registry has for it.
type Pushed struct {
	Ref         layers.Ref `json:"ref"`
	Compression string     `json:"compression"`
	Digest      string     `json:"digest"`
	// Images are the image manifests' digests by platform, when Digest is
	// an index (several platforms, or attestations beside the image): the
	// reproducible digests of the images themselves.
	Images map[string]string `json:"images,omitempty"`
}

// Stats counts the graph's steps (runs, copies and tests) in the solve.
type Stats struct {
	Vertices int // steps in the solve
	Cached   int // answered from cache
	Executed int // completed and not cached
}

// Build solves the plan on BuildKit and exports the runtime image, in
// the shape of BuildKit's client: the solve's options (exports.go), the
// gateway function (gateway.go) and the progress display (progress.go)
// run together, and the pushed outputs are read back by digest.
func Build(ctx context.Context, p *recipes.Plan, in Inputs, o Options) (*Result, error) {
	if o.Client == nil {
		return nil, errors.New("builder: no client")
	}
	wheels, cleanupWheels, err := prepareWheels(ctx, p, &in, o.WheelCache, o.Platforms)
	if err != nil {
		return nil, err
	}
	defer cleanupWheels()
	graphs, err := Graphs(p, in, o.Platforms)
	if err != nil {
		return nil, err
	}
	if err := checkPlatforms(ctx, o.Client, graphs); err != nil {
		return nil, err
	}
	res := &Result{ConfigBytes: map[string][]byte{}}
	def, err := graphs[0].Marshal(ctx, graphs[0].Runtime)
	if err != nil {
		return nil, err
	}
	res.Graph = DefinitionDigest(def)
	so, err := newSolve(p, in, o, graphs[0].Layout)
	if err != nil {
		return nil, err
	}
	defer so.close()
	disp, err := newDisplay(o.Progress, o.ProgressOut, graphs)
	if err != nil {
		return nil, err
	}
	if wheels.hasCached() {
		wfs, err := fsutil.NewFS(wheels.dir)
		if err != nil {
			return nil, err
		}
		so.LocalMounts[WheelsName] = wfs
	}
	gw := &gatewayBuild{plan: p, in: in, o: so.opts, graphs: graphs, configs: res.ConfigBytes, wheels: wheels}
	ch := make(chan *client.SolveStatus)
	eg, ectx := errgroup.WithContext(ctx)
	var resp *client.SolveResponse
	eg.Go(func() error {
		var err error
		resp, err = o.Client.Build(ectx, so.SolveOpt, "kiln", gw.run, ch)
		return err
	})
	eg.Go(func() error {
		res.Status = disp.run(ectx, ch)
		return nil
	})
	err = eg.Wait()
	if wheels != nil {
		for _, u := range wheels.uses {
			res.Wheels = append(res.Wheels, *u)
		}
	}
	if err != nil {
		return res, stepError(err, in.SourceDateEpoch)
	}
	res.Response = resp.ExporterResponse
	res.Digest = resp.ExporterResponse[exptypes.ExporterImageDigestKey]
	if res.Pushed, err = pushedDigests(ctx, o, so.provenance); err != nil {
		return res, err
	}
	if len(res.Pushed) > 0 {
		res.Digest = res.Pushed[0].Digest
	}
	return res, nil
}

// solve is a build's client.SolveOpt and what it holds open.
type solve struct {
	client.SolveOpt
	// opts are the build's options with kiln's parameters among the
	// attestations when the build has provenance.
	opts       Options
	provenance bool
	closers    []io.Closer
	cleanup    func()
}

func (s *solve) close() {
	for _, c := range s.closers {
		c.Close()
	}
	if s.cleanup != nil {
		s.cleanup()
	}
}

// newSolve makes the solve's options: the session's registry auth, the
// epoch, the provenance, the tools and context mounts, the exports and
// the caches.
func newSolve(p *recipes.Plan, in Inputs, o Options, L *Layout) (*solve, error) {
	s := &solve{SolveOpt: client.SolveOpt{
		LocalMounts:         map[string]fsutil.FS{},
		AllowedEntitlements: []string{entitlements.EntitlementNetworkHost.String()},
		FrontendAttrs:       map[string]string{},
		Session:             []session.Attachable{authprovider.NewDockerAuthProvider(authprovider.DockerAuthProviderConfig{})},
		CacheImports:        cacheEntries(o.CacheFrom),
		CacheExports:        cacheEntries(o.CacheTo),
	}}
	if in.SourceDateEpoch != nil {
		s.FrontendAttrs["build-arg:SOURCE_DATE_EPOCH"] = strconv.FormatInt(*in.SourceDateEpoch, 10)
	}
	var err error
	if o, err = s.withProvenance(p, in, o); err != nil {
		return nil, err
	}
	s.opts = o
	if L.NeedsTools() {
		dir, cleanup, err := toolsDir(o.Tools)
		if err != nil {
			return nil, err
		}
		s.cleanup = cleanup
		tfs, err := fsutil.NewFS(dir)
		if err != nil {
			s.close()
			return nil, err
		}
		s.LocalMounts[ToolsName] = tfs
	}
	ctxDir := cmp.Or(o.ContextDir, ".")
	fs, err := fsutil.NewFS(ctxDir)
	if err != nil {
		s.close()
		return nil, fmt.Errorf("build context %s: %w", ctxDir, err)
	}
	s.LocalMounts[ContextName] = fs
	if s.Exports, s.closers, err = exports(p, in, o); err != nil {
		s.close()
		return nil, err
	}
	return s, nil
}

// withProvenance asks for BuildKit's provenance and returns o with kiln's
// parameters among its attestations.
func (s *solve) withProvenance(p *recipes.Plan, in Inputs, o Options) (Options, error) {
	prov, err := provenanceAttr(o.Provenance, o.BuilderID)
	if err != nil {
		return o, err
	}
	if (len(o.Attestations) > 0 || o.Attest != nil) && prov == "" {
		return o, errors.New("attestations beside the image need provenance (they share its attestation manifest in the pushed index)")
	}
	if prov == "" {
		return o, nil
	}
	if err := provenanceSafe(p, o.Provenance); err != nil {
		return o, err
	}
	for _, out := range o.Outputs {
		if out.Ref.Kind == layers.KindDockerArchive {
			// docker load has no place for an attestation manifest.
			return o, fmt.Errorf("output %s: provenance is attached in an OCI index, which a docker-archive cannot hold: write oci:DIR or push", out.Ref.Path)
		}
	}
	s.provenance = true
	s.FrontendAttrs["attest:provenance"] = prov
	// BuildKit records no request arguments for a build driven through
	// the gateway by its client (kiln's case: the frontend attributes
	// become the client's build options), so kiln's parameters are a
	// statement of their own beside the provenance, in the same
	// attestation manifest and about the same image.
	params, err := json.MarshalIndent(map[string]any{"buildType": KilnParamsPredicateType, "parameters": provenanceParams(p, in, o.Params)}, "", "  ")
	if err != nil {
		return o, err
	}
	o.Attestations = append(append([]Attestation(nil), o.Attestations...), Attestation{PredicateType: KilnParamsPredicateType, Path: "kiln-build.json", Body: params})
	return o, nil
}

// checkPlatforms fails before any work when no worker of the daemon can
// run steps for one of the requested platforms: otherwise the first RUN
// step would fail with an exec format error deep in the build.
func checkPlatforms(ctx context.Context, c *client.Client, graphs []*Graph) error {
	ws, err := c.ListWorkers(ctx)
	if err != nil {
		return fmt.Errorf("listing the builder's workers: %w", err)
	}
	var have []string
	supported := map[string]bool{}
	for _, w := range ws {
		for _, p := range w.Platforms {
			s := PlatformString(p)
			if !supported[s] {
				have = append(have, s)
			}
			supported[s] = true
			supported[p.OS+"/"+p.Architecture] = true
		}
	}
	for _, g := range graphs {
		want := PlatformString(g.Platform)
		if !supported[want] {
			return fmt.Errorf("the builder cannot run %s steps (its workers support %s): register QEMU binfmt handlers on the builder host or use a native %s builder with --builder", want, strings.Join(have, ", "), want)
		}
	}
	return nil
}

// Tools directories of other kiln binaries (one per version a user ran,
// ~40 MB each with a dynamic kiln's C library) are removed once unused
// for toolsIdle, the newest toolsKeep aside. A use is the time of a
// sibling file, DIR.used (the directory's own times are part of the
// build context, which must not change between builds).
const (
	toolsIdle = time.Hour
	toolsKeep = 4
)

// sweepTools removes the tools directories under root that are not keep,
// not among the toolsKeep most recently used, and unused for toolsIdle.
// Errors are ignored: the sweep only saves disk.
func sweepTools(root, keep string) {
	ents, err := os.ReadDir(root)
	if err != nil {
		return
	}
	type used struct {
		name string
		at   time.Time
	}
	var dirs []used
	for _, e := range ents {
		if !e.IsDir() || e.Name() == keep || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		fi, err := os.Stat(filepath.Join(root, e.Name()+".used"))
		if err != nil {
			fi, err = e.Info()
		}
		if err == nil {
			dirs = append(dirs, used{e.Name(), fi.ModTime()})
		}
	}
	sort.Slice(dirs, func(i, j int) bool { return dirs[i].at.After(dirs[j].at) })
	for i, d := range dirs {
		if i >= toolsKeep-1 && time.Since(d.at) > toolsIdle {
			os.RemoveAll(filepath.Join(root, d.name))
			os.Remove(filepath.Join(root, d.name+".used"))
		}
	}
}

// markToolsUsed notes a use of the tools directory dir (see sweepTools).
func markToolsUsed(dir string) {
	f, err := os.OpenFile(dir+".used", os.O_CREATE|os.O_WRONLY, 0o644)
	if err == nil {
		f.Close()
	}
	now := time.Now()
	_ = os.Chtimes(dir+".used", now, now)
}

// toolsDir makes the kiln-tools context: a directory holding exe as
// ToolsBinary, which runs inside the image being built, whatever C library
// that has. A static exe (make build, a release binary) is the file
// itself. A dynamically linked one (go install or go build with cgo on,
// as the README's Install section gives) comes with its C library: its
// ELF interpreter and the shared libraries it needs, copied from this
// host into ToolsBundle, and ToolsBinary is a /bin/sh launcher that runs
// exe through that interpreter on those libraries, so the image's own
// libc (another version, or none of glibc's) is never used. The bundle is
// only mounted into the pruning steps; nothing of it lands in the image.
//
// The directory is named by exe's sha256 under the user's cache directory
// and its files have a fixed mode and time, so the context's content key
// (and the cache of the steps that mount it) stays the same from one
// build to the next while the binary's bytes do; a fresh directory per
// build (new inode times, link counts) made a no-op rebuild execute the
// pruning steps again.
func toolsDir(exe string) (string, func(), error) {
	if exe == "" {
		return "", nil, errors.New("builder: the plan prunes GPU code (gpu_code) but no kiln executable was given to run it in the build (Options.Tools)")
	}
	interp, libs, err := dynamicDeps(exe)
	if err != nil {
		return "", nil, fmt.Errorf("kiln tools %s: %w", exe, err)
	}
	h, err := blob.FileDigest(exe)
	if err != nil {
		return "", nil, fmt.Errorf("kiln tools: %w", err)
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	dir := filepath.Join(cache, "kiln", "tools", h.Hex)
	nop := func() {}
	if fi, err := os.Stat(filepath.Join(dir, ToolsBinary)); err == nil && fi.Mode().IsRegular() {
		markToolsUsed(dir)
		return dir, nop, nil
	}
	defer sweepTools(filepath.Dir(dir), h.Hex)
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return "", nil, err
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dir), ".tools-*")
	if err != nil {
		return "", nil, err
	}
	epoch := time.Unix(0, 0)
	put := func(src, rel string, mode os.FileMode) error {
		dst := filepath.Join(tmp, rel)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return err
		}
		if err := atomicfile.Copy(src, dst, mode); err != nil {
			return err
		}
		return os.Chtimes(dst, epoch, epoch)
	}
	if interp == "" {
		err = put(exe, ToolsBinary, 0o755)
	} else {
		err = put(exe, path.Join(ToolsBundle, "kiln"), 0o755)
		if err == nil {
			err = put(interp, path.Join(ToolsBundle, "ld.so"), 0o755)
		}
		for soname, p := range libs {
			if err == nil {
				err = put(p, path.Join(ToolsBundle, "lib", soname), 0o644)
			}
		}
		if err == nil {
			launcher := filepath.Join(tmp, ToolsBinary)
			err = os.WriteFile(launcher, []byte(toolsLauncher), 0o755)
			if err == nil {
				err = os.Chmod(launcher, 0o755)
			}
			if err == nil {
				err = os.Chtimes(launcher, epoch, epoch)
			}
		}
	}
	if err != nil {
		os.RemoveAll(tmp)
		return "", nil, fmt.Errorf("kiln tools: %w", err)
	}
	if err := os.Rename(tmp, dir); err != nil {
		os.RemoveAll(tmp)
		if _, serr := os.Stat(filepath.Join(dir, ToolsBinary)); serr != nil {
			return "", nil, fmt.Errorf("kiln tools: %w", err)
		}
		// Another build put the same binary there first.
	}
	markToolsUsed(dir)
	return dir, nop, nil
}

// ToolsBundle is the kiln-tools directory holding a dynamically linked
// kiln with its interpreter and libraries (toolsDir).
const ToolsBundle = ToolsBinary + ".bundle"

// toolsLauncher runs the bundled kiln through the bundled interpreter on
// the bundled libraries only.
const toolsLauncher = `#!/bin/sh
# kiln, dynamically linked on the build host (go install with cgo on): run
# through the C library it was linked against, never the image's.
d="${0%/*}/` + ToolsBundle + `"
exec "$d/ld.so" --inhibit-cache --library-path "$d/lib" "$d/kiln" "$@"
`

// libDirs are where the host's shared libraries are looked for, after the
// interpreter's own directory.
var libDirs = []string{"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib/aarch64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/lib64", "/usr/lib64", "/lib", "/usr/lib"}

// dynamicDeps is exe's ELF interpreter ("" for a static executable) and
// the shared libraries it needs, transitively, by soname → host path.
func dynamicDeps(exe string) (string, map[string]string, error) {
	f, err := elf.Open(exe)
	if err != nil {
		return "", nil, err
	}
	defer f.Close()
	interp := ""
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			b, err := io.ReadAll(io.LimitReader(p.Open(), 4096))
			if err != nil {
				return "", nil, err
			}
			interp = strings.TrimRight(string(b), "\x00")
		}
	}
	if interp == "" {
		return "", nil, nil
	}
	interp, err = filepath.EvalSymlinks(interp)
	if err != nil {
		return "", nil, fmt.Errorf("its interpreter: %w", err)
	}
	dirs := append([]string{filepath.Dir(interp)}, libDirs...)
	libs := map[string]string{}
	var need func(*elf.File) error
	need = func(f *elf.File) error {
		names, err := f.ImportedLibraries()
		if err != nil {
			return err
		}
		for _, n := range names {
			if _, ok := libs[n]; ok || strings.Contains(n, "/") {
				continue
			}
			found := ""
			for _, d := range dirs {
				if p, err := filepath.EvalSymlinks(filepath.Join(d, n)); err == nil {
					if lf, err := elf.Open(p); err == nil && lf.Machine == f.Machine && lf.Class == f.Class {
						found = p
						libs[n] = p
						err := need(lf)
						lf.Close()
						if err != nil {
							return err
						}
						break
					}
				}
			}
			if found == "" {
				return fmt.Errorf("it is dynamically linked and needs %s, which is not in %s: use a statically linked kiln (a release binary, or CGO_ENABLED=0 go install github.com/kiln-build/kiln/cmd/kiln@latest), or set gpu_code.prune: false in the recipe", n, strings.Join(dirs, ", "))
			}
		}
		return nil
	}
	if err := need(f); err != nil {
		return "", nil, err
	}
	return interp, libs, nil
}

func ToolsDir(exe string) (string, func(), error) { return toolsDir(exe) }
