package builder

import (
	"context"
	"debug/elf"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/kiln-build/kiln/internal/atomicfile"
	"github.com/kiln-build/kiln/internal/unixsock"
	"github.com/kiln-build/kiln/layers"
	"github.com/kiln-build/kiln/layers/blob"
	"github.com/kiln-build/kiln/recipes"
	"github.com/kiln-build/kiln/sbom"
	"github.com/moby/buildkit/client"
	"github.com/moby/buildkit/client/llb/sourceresolver"
	"github.com/moby/buildkit/exporter/containerimage/exptypes"
	gateway "github.com/moby/buildkit/frontend/gateway/client"
	"github.com/moby/buildkit/session"
	"github.com/moby/buildkit/session/auth/authprovider"
	"github.com/moby/buildkit/util/entitlements"
	"github.com/moby/buildkit/util/progress/progressui"
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
const StartHint = "use the buildx builder most Docker users already run: --builder docker-container://buildx_buildkit_default (the container `docker buildx create --node default --driver docker-container --bootstrap` starts; any buildx_buildkit_* container `docker ps` lists works), or point --builder / $BUILDKIT_HOST at another buildkitd (unix://, tcp://, docker-container://NAME, kube-pod://POD); without Docker: `sudo bash scripts/buildkitd.sh start`"

// TLS configures a tcp:// connection.
type TLS struct {
	ServerName string
	CACert     string
	Cert, Key  string
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

// Output is one export destination.
type Output struct {
	Type string // "oci" (directory layout), "oci-tar", "docker-archive", or "image" (push)
	Path string // directory or file; the reference for "image"
	// Compression overrides Options.Compression for this output: two
	// image outputs, gzip under TAG and zstd under TAG-zstd, publish both
	// encodings of one solve.
	Compression string
}

// CacheSpec is a --cache-from/--cache-to entry.
type CacheSpec struct {
	Type  string // registry or local
	Attrs map[string]string
}

// ParseCacheSpec accepts "type=registry,ref=R[,k=v]", "type=local,src|dest=DIR",
// "local:DIR" or a bare registry reference. to selects export defaults
// (mode=max, zstd, OCI media types).
func ParseCacheSpec(s string, to bool) (CacheSpec, error) {
	c := CacheSpec{Attrs: map[string]string{}}
	switch {
	case strings.Contains(s, "="):
		for _, kv := range strings.Split(s, ",") {
			k, v, ok := strings.Cut(kv, "=")
			if !ok {
				return c, fmt.Errorf("cache %q: %q is not key=value", s, kv)
			}
			if k == "type" {
				c.Type = v
			} else {
				c.Attrs[k] = v
			}
		}
	case strings.HasPrefix(s, "local:"):
		c.Type = "local"
		dir := strings.TrimPrefix(s, "local:")
		if to {
			c.Attrs["dest"] = dir
		} else {
			c.Attrs["src"] = dir
		}
	case s == "":
		return c, fmt.Errorf("empty cache spec")
	default:
		c.Type = "registry"
		c.Attrs["ref"] = s
	}
	switch c.Type {
	case "registry":
		if c.Attrs["ref"] == "" {
			return c, fmt.Errorf("cache %q: registry cache needs ref=", s)
		}
		if to {
			def(c.Attrs, "mode", "max")
			def(c.Attrs, "compression", "zstd")
			def(c.Attrs, "oci-mediatypes", "true")
			def(c.Attrs, "image-manifest", "true")
		}
		if isLoopbackRef(c.Attrs["ref"]) {
			def(c.Attrs, "registry.insecure", "true")
		}
	case "local":
		key := "src"
		if to {
			key = "dest"
			def(c.Attrs, "mode", "max")
			def(c.Attrs, "compression", "zstd")
			def(c.Attrs, "oci-mediatypes", "true")
		}
		if c.Attrs[key] == "" {
			return c, fmt.Errorf("cache %q: local cache needs %s=DIR", s, key)
		}
	default:
		return c, fmt.Errorf("cache %q: type %q is not registry or local", s, c.Type)
	}
	return c, nil
}

func def(m map[string]string, k, v string) {
	if _, ok := m[k]; !ok {
		m[k] = v
	}
}

func isLoopbackRef(ref string) bool {
	host, _, _ := strings.Cut(ref, "/")
	h, _, err := net.SplitHostPort(host)
	if err != nil {
		h = host
	}
	if h == "localhost" {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
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
	Progress    string    // auto, tty, plain, rawjson, quiet
	ProgressOut io.Writer // default os.Stderr
	NoProbes    bool
	// Insecure registries (plain HTTP) for push; loopback hosts always are.
	Insecure []string
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
	Wheels      []WheelUse        // what the wheel cache did, per compiled wheel
}

// Pushed is an image output and the digest the registry has for it.
type Pushed struct {
	Ref         string `json:"ref"`
	Compression string `json:"compression"`
	Digest      string `json:"digest"`
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

// Build solves the plan on BuildKit and exports the runtime image.
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
	if def, err := graphs[0].Marshal(ctx, graphs[0].Runtime); err == nil {
		res.Graph = DefinitionDigest(def)
	} else {
		return nil, err
	}

	compression := func(c string) (string, error) {
		if c == "" {
			c = o.Compression
		}
		switch c {
		case "", "zstd":
			return "zstd", nil
		case "gzip", "uncompressed":
			return c, nil
		case "none":
			return "uncompressed", nil
		}
		return "", fmt.Errorf("compression %q: want zstd, gzip or none", c)
	}
	if _, err := compression(""); err != nil {
		return nil, err
	}
	imgAttrs := func(comp string) map[string]string {
		a := map[string]string{
			"compression":       comp,
			"force-compression": "true",
			"oci-mediatypes":    "true",
			"rewrite-timestamp": "true",
		}
		if in.SourceDateEpoch != nil {
			a["source-date-epoch"] = strconv.FormatInt(*in.SourceDateEpoch, 10)
		}
		return a
	}
	solveOpt := client.SolveOpt{
		LocalMounts:         map[string]fsutil.FS{},
		AllowedEntitlements: []string{entitlements.EntitlementNetworkHost.String()},
		FrontendAttrs:       map[string]string{},
		Session:             []session.Attachable{authprovider.NewDockerAuthProvider(authprovider.DockerAuthProviderConfig{})},
	}
	if in.SourceDateEpoch != nil {
		solveOpt.FrontendAttrs["build-arg:SOURCE_DATE_EPOCH"] = strconv.FormatInt(*in.SourceDateEpoch, 10)
	}
	prov, err := provenanceAttr(o.Provenance, o.BuilderID)
	if err != nil {
		return nil, err
	}
	if (len(o.Attestations) > 0 || o.Attest != nil) && prov == "" {
		return nil, errors.New("attestations beside the image need provenance (they share its attestation manifest in the pushed index)")
	}
	if prov != "" {
		if err := provenanceSafe(p, o.Provenance); err != nil {
			return nil, err
		}
		for _, out := range o.Outputs {
			if out.Type == "docker-archive" {
				// docker load has no place for an attestation manifest.
				return nil, fmt.Errorf("output %s: provenance is attached in an OCI index, which a docker-archive cannot hold: write oci:DIR or push", out.Path)
			}
		}
		solveOpt.FrontendAttrs["attest:provenance"] = prov
		// BuildKit records no request arguments for a build driven through
		// the gateway by its client (kiln's case: the frontend attributes
		// become the client's build options), so kiln's parameters are a
		// statement of their own beside the provenance, in the same
		// attestation manifest and about the same image.
		params, err := json.MarshalIndent(map[string]any{"buildType": KilnParamsPredicateType, "parameters": provenanceParams(p, in, o.Params)}, "", "  ")
		if err != nil {
			return nil, err
		}
		o.Attestations = append(append([]Attestation(nil), o.Attestations...), Attestation{PredicateType: KilnParamsPredicateType, Path: "kiln-build.json", Body: params})
	}
	if graphs[0].Layout.NeedsTools() {
		dir, cleanup, err := toolsDir(o.Tools)
		if err != nil {
			return nil, err
		}
		defer cleanup()
		tfs, err := fsutil.NewFS(dir)
		if err != nil {
			return nil, err
		}
		solveOpt.LocalMounts[ToolsName] = tfs
	}
	ctxDir := o.ContextDir
	if ctxDir == "" {
		ctxDir = "."
	}
	fs, err := fsutil.NewFS(ctxDir)
	if err != nil {
		return nil, fmt.Errorf("build context %s: %w", ctxDir, err)
	}
	solveOpt.LocalMounts[ContextName] = fs
	if wheels.hasCached() {
		wfs, err := fsutil.NewFS(wheels.dir)
		if err != nil {
			return nil, err
		}
		solveOpt.LocalMounts[WheelsName] = wfs
	}
	var closers []io.Closer
	defer func() {
		for _, c := range closers {
			c.Close()
		}
	}()
	var local int
	for _, out := range o.Outputs {
		if out.Type != "image" {
			local++
		}
	}
	for _, out := range o.Outputs {
		if out.Type == "oci" && local > 1 {
			// BuildKit's client writes the layout's index.json from the
			// merged exporter response: another local export's digest would
			// end up in it.
			return nil, fmt.Errorf("an oci:DIR output cannot be combined with another oci or docker-archive output in one build; build again for the other (it is fully cached)")
		}
		oc, err := compression(out.Compression)
		if err != nil {
			return nil, fmt.Errorf("output %s: %v", out.Path, err)
		}
		a := imgAttrs(oc)
		switch out.Type {
		case "image":
			name, err := NormalizeRef(out.Path)
			if err != nil {
				return nil, fmt.Errorf("output %s: %v", out.Path, err)
			}
			a["name"] = name
			a["push"] = "true"
			if isLoopbackRef(out.Path) || insecureHost(out.Path, o.Insecure) {
				a["registry.insecure"] = "true"
			}
			solveOpt.Exports = append(solveOpt.Exports, client.ExportEntry{Type: client.ExporterImage, Attrs: a})
		case "oci":
			if err := os.MkdirAll(out.Path, 0o755); err != nil {
				return nil, err
			}
			a["tar"] = "false"
			solveOpt.Exports = append(solveOpt.Exports, client.ExportEntry{Type: client.ExporterOCI, Attrs: a, OutputDir: out.Path})
		case "oci-tar", "docker-archive":
			f, err := os.Create(out.Path)
			if err != nil {
				return nil, err
			}
			closers = append(closers, f)
			typ := client.ExporterOCI
			if out.Type == "docker-archive" {
				typ = client.ExporterDocker
				if a["name"] == "" {
					a["name"] = "kiln.local/" + sanitizeName(p.Name) + ":latest"
				}
				// docker load wants the layers it can read.
				if oc == "zstd" {
					a["oci-mediatypes"] = "false"
					a["compression"] = "gzip"
				}
			}
			ff := f
			solveOpt.Exports = append(solveOpt.Exports, client.ExportEntry{Type: typ, Attrs: a, Output: func(map[string]string) (io.WriteCloser, error) { return nopCloser{ff}, nil }})
		default:
			return nil, fmt.Errorf("output type %q: want image, oci, oci-tar or docker-archive", out.Type)
		}
	}
	for _, c := range o.CacheFrom {
		solveOpt.CacheImports = append(solveOpt.CacheImports, client.CacheOptionsEntry{Type: c.Type, Attrs: c.Attrs})
	}
	for _, c := range o.CacheTo {
		solveOpt.CacheExports = append(solveOpt.CacheExports, client.CacheOptionsEntry{Type: c.Type, Attrs: c.Attrs})
	}

	buildFunc := func(ctx context.Context, c gateway.Client) (*gateway.Result, error) {
		out := gateway.NewResult()
		var eps exptypes.Platforms
		atts, err := attestationRefs(ctx, c, o.Attestations)
		if err != nil {
			return nil, err
		}
		for _, g := range graphs {
			if o.MaxLayerSize > 0 {
				sg, err := splitGraph(ctx, c, p, in, g, o.MaxLayerSize)
				if err != nil {
					return nil, err
				}
				g = sg
			}
			pl := g.Platform
			_, _, base, err := c.ResolveImageConfig(ctx, g.Layout.Runtime.Base, sourceresolver.Opt{
				LogName:  "resolve runtime base " + g.Layout.Runtime.Base,
				ImageOpt: &sourceresolver.ResolveImageOpt{Platform: &pl, ResolveMode: "default"},
			})
			if err != nil {
				return nil, fmt.Errorf("runtime base %s: %w", g.Layout.Runtime.Base, err)
			}
			cfg, err := ImageConfig(p, in, pl, base)
			if err != nil {
				return nil, err
			}
			cfgJSON, err := json.Marshal(cfg)
			if err != nil {
				return nil, err
			}
			def, err := g.Marshal(ctx, g.Runtime)
			if err != nil {
				return nil, err
			}
			r, err := c.Solve(ctx, gateway.SolveRequest{Definition: def.ToPB(), Evaluate: true})
			if err != nil {
				return nil, err
			}
			ref, err := r.SingleRef()
			if err != nil {
				return nil, err
			}
			// Before the tests: a compile that took hours is kept even
			// when a test then fails.
			if err := wheels.pushCompiled(ctx, c, g); err != nil {
				return nil, err
			}
			if g.HasProbe && !o.NoProbes {
				pdef, err := g.Marshal(ctx, g.Probe)
				if err != nil {
					return nil, err
				}
				if _, err := c.Solve(ctx, gateway.SolveRequest{Definition: pdef.ToPB(), Evaluate: true}); err != nil {
					return nil, fmt.Errorf("recipe test failed in the runtime image: %w", err)
				}
			}
			id := PlatformString(pl)
			res.ConfigBytes[id] = cfgJSON
			if len(graphs) == 1 {
				out.SetRef(ref)
				out.AddMeta(exptypes.ExporterImageConfigKey, cfgJSON)
				// The base's layers are then left as they are by the
				// timestamp rewrite (shared with the base, never re-pushed).
				out.AddMeta(exptypes.ExporterImageBaseConfigKey, base)
			} else {
				out.AddRef(id, ref)
				out.AddMeta(exptypes.ExporterImageConfigKey+"/"+id, cfgJSON)
				out.AddMeta(exptypes.ExporterImageBaseConfigKey+"/"+id, base)
			}
			for _, a := range atts {
				out.AddAttestation(id, a)
			}
			if o.Attest != nil {
				as, err := o.Attest(ctx, id, refFiles{ref})
				if err != nil {
					return nil, fmt.Errorf("attestations for %s: %w", id, err)
				}
				gas, err := attestationRefs(ctx, c, as)
				if err != nil {
					return nil, err
				}
				for _, a := range gas {
					out.AddAttestation(id, a)
				}
			}
			eps.Platforms = append(eps.Platforms, exptypes.Platform{ID: id, Platform: pl})
		}
		if len(graphs) > 1 {
			dt, err := json.Marshal(eps)
			if err != nil {
				return nil, err
			}
			out.AddMeta(exptypes.ExporterPlatformsKey, dt)
		}
		return out, nil
	}

	ch := make(chan *client.SolveStatus)
	mode := o.Progress
	if mode == "" {
		mode = "auto"
	}
	w := o.ProgressOut
	if w == nil {
		w = os.Stderr
	}
	var disp progressui.Display
	show := mode != "quiet" && mode != "none"
	if show {
		cons, _ := w.(*os.File)
		var err error
		if cons != nil {
			disp, err = progressui.NewDisplay(cons, progressui.DisplayMode(mode))
		} else {
			if mode == "auto" || mode == "tty" {
				mode = "plain"
			}
			disp, err = progressui.NewDisplay(w, progressui.DisplayMode(mode))
		}
		if err != nil {
			return nil, fmt.Errorf("--progress %s: %w", o.Progress, err)
		}
	}
	eg, ectx := errgroup.WithContext(ctx)
	var resp *client.SolveResponse
	eg.Go(func() error {
		var err error
		resp, err = o.Client.Build(ectx, solveOpt, "kiln", buildFunc, ch)
		return err
	})
	// Only the graph's own steps count as executed; resolving bases,
	// sending the context and exporting are not build steps.
	stepNames := map[string]bool{}
	for _, g := range graphs {
		for _, st := range []Stage{g.Layout.Devel, g.Layout.Runtime} {
			for _, s := range st.Steps {
				stepNames[s.Name] = true
				if s.Compile != nil {
					stepNames[CachedStepName(s.Compile.Package)] = true
				}
			}
		}
	}
	isStep := func(name string) bool {
		// Split installs are named once the devel stage is built.
		return stepNames[name] || strings.HasPrefix(name, "test ") || strings.HasPrefix(name, "runtime: install ")
	}
	eg.Go(func() error {
		completed := map[string]bool{}
		cached := map[string]bool{}
		seen := map[string]bool{}
		forward := make(chan *client.SolveStatus)
		done := make(chan error, 1)
		if show {
			go func() {
				_, err := disp.UpdateFrom(context.WithoutCancel(ectx), forward)
				done <- err
			}()
		} else {
			go func() {
				for range forward {
				}
				done <- nil
			}()
		}
		for s := range ch {
			for _, v := range s.Vertexes {
				k := v.Digest.String()
				if !isStep(v.Name) {
					continue
				}
				seen[k] = true
				if v.Cached {
					cached[k] = true
				}
				if v.Completed != nil && !v.Cached && v.Error == "" {
					completed[k] = true
				}
			}
			forward <- s
		}
		close(forward)
		<-done
		res.Status.Vertices = len(seen)
		res.Status.Cached = len(cached)
		for k := range completed {
			if !cached[k] {
				res.Status.Executed++
			}
		}
		return nil
	})
	err = eg.Wait()
	if wheels != nil {
		for _, u := range wheels.uses {
			res.Wheels = append(res.Wheels, *u)
		}
	}
	if err != nil {
		return res, err
	}
	res.Response = resp.ExporterResponse
	res.Digest = resp.ExporterResponse[exptypes.ExporterImageDigestKey]
	// With several image exports the exporters' responses are merged
	// into one map: each pushed reference is asked for its digest.
	for _, out := range o.Outputs {
		if out.Type != "image" {
			continue
		}
		oc, _ := compression(out.Compression)
		dg, imgs, err := layers.PlatformDigests(ctx, out.Path, layers.WithInsecureRegistries(o.Insecure...))
		if err != nil {
			return res, fmt.Errorf("output %s: pushed, but resolving its digest: %w", out.Path, err)
		}
		pu := Pushed{Ref: out.Path, Compression: oc, Digest: dg}
		if len(imgs) > 1 || prov != "" {
			pu.Images = imgs
		}
		res.Pushed = append(res.Pushed, pu)
	}
	if len(res.Pushed) > 0 {
		res.Digest = res.Pushed[0].Digest
	}
	return res, nil
}

type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }

func insecureHost(ref string, hosts []string) bool {
	host, _, _ := strings.Cut(ref, "/")
	for _, h := range hosts {
		if h == host {
			return true
		}
	}
	return false
}

func sanitizeName(s string) string {
	s = strings.ToLower(s)
	var b strings.Builder
	for _, r := range s {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.' {
			b.WriteRune(r)
		} else {
			b.WriteByte('-')
		}
	}
	if b.Len() == 0 {
		return "image"
	}
	return b.String()
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

// toolsDir makes the kiln-tools context: a directory holding exe as
// ToolsBinary. exe must be statically linked: it runs inside the image being
// built, whatever C library that has. The directory is named by exe's
// sha256 under the user's cache directory and its file has a fixed mode and
// time, so the context's content key (and the cache of the steps that
// mount it) stays the same from one build to the next while the binary's
// bytes do; a fresh directory per build (new inode times, link counts) made
// a no-op rebuild execute the pruning steps again.
func toolsDir(exe string) (string, func(), error) {
	if exe == "" {
		return "", nil, errors.New("builder: the plan prunes GPU code (gpu_code) but no kiln executable was given to run it in the build (Options.Tools)")
	}
	f, err := elf.Open(exe)
	if err != nil {
		return "", nil, fmt.Errorf("kiln tools %s: %w", exe, err)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			f.Close()
			return "", nil, fmt.Errorf("kiln tools %s is dynamically linked: kiln build prunes GPU code inside the image with kiln itself, which must be static; rebuild with CGO_ENABLED=0 (make build does) or set gpu_code.prune: false in the recipe", exe)
		}
	}
	f.Close()
	h, err := blob.FileDigest(exe)
	sum := h.Hex
	if err != nil {
		return "", nil, fmt.Errorf("kiln tools: %w", err)
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	dir := filepath.Join(cache, "kiln", "tools", sum)
	nop := func() {}
	if fi, err := os.Stat(filepath.Join(dir, ToolsBinary)); err == nil && fi.Mode().IsRegular() {
		return dir, nop, nil
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return "", nil, err
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dir), ".tools-*")
	if err != nil {
		return "", nil, err
	}
	dst := filepath.Join(tmp, ToolsBinary)
	epoch := time.Unix(0, 0)
	err = atomicfile.Copy(exe, dst, 0o755)
	if err == nil {
		err = os.Chtimes(dst, epoch, epoch)
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
	return dir, nop, nil
}

// ToolsDir is the kiln-tools directory for exe (see toolsDir), for the
// other commands that mount kiln into a container: kiln slim's recording
// probe.
func ToolsDir(exe string) (string, func(), error) { return toolsDir(exe) }
