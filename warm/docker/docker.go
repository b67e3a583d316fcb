package docker

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/kiln-build/kiln/internal/bytesize"
	"github.com/kiln-build/kiln/internal/preflight"
	"github.com/kiln-build/kiln/internal/unixsock"
	"github.com/kiln-build/kiln/warm"
	"github.com/kiln-build/kiln/warm/ocilayout"
	"github.com/opencontainers/go-digest"
)

// Docker warms a Docker engine (its own image store, not containerd's)
// through its API on a unix socket. Docker has no per-blob presence or
// ingest API, so the unit is the image: GET /images/{name}/json says
// whether the image is complete (its ID is the config digest and its
// RootFS layers are the config's diff IDs). Otherwise the layers the engine
// lacks are staged on disk first, in an OCI layout the warm engine fills
// with its own fetch (resumable, chunked, verified: a killed warm resumes
// from the staged bytes), and a docker-archive is streamed into POST /images/load from the
// stage: the config, then each layer, verified again as it passes, and
// manifest.json last, so the engine (which unpacks the whole archive before
// it loads anything) never sees a manifest for bytes that did not verify.
// Layers whose chain the engine already holds (from any of its images) are
// left out of the archive: docker load skips a layer whose chain ID exists
// without reading its file, so they are neither fetched nor staged. The
// staged layers are removed after a successful load (KeepStage keeps them).
//
// Docker before 23.0 cannot load zstd layers: NoZstd says so, and Resolve
// then takes the gzip variant or refuses a zstd-only image.
type Docker struct {
	sock    string
	hc      *http.Client
	version string
	api     string
	// stage is the directory layers are staged in before docker load;
	// keepStage keeps them after a successful load.
	stage     string
	keepStage bool
}

// Options configure Open.
type Options struct {
	// Stage is where layer blobs are staged before docker load (an OCI
	// layout; default DefaultStage()).
	Stage string
	// KeepStage keeps the staged blobs after a successful load.
	KeepStage bool
}

// Open connects to the Docker engine listening on the socket addr.
func Open(ctx context.Context, addr string, o Options) (*Docker, error) {
	if _, err := os.Stat(addr); err != nil {
		return nil, fmt.Errorf("target docker:%s: %v (is dockerd running? name its socket: --target docker:/var/run/docker.sock)", addr, err)
	}
	if err := unixsock.Check(ctx, addr, unixsock.Docker); err != nil {
		return nil, fmt.Errorf("target docker:%s: %w", addr, err)
	}
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", addr)
		},
		DisableCompression: true,
	}
	t := &Docker{sock: addr, hc: &http.Client{Transport: tr}, stage: o.Stage, keepStage: o.KeepStage}
	if t.stage == "" {
		t.stage = DefaultStage()
	}
	var v struct {
		Version    string `json:"Version"`
		APIVersion string `json:"ApiVersion"`
	}
	vctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := t.getJSON(vctx, "/version", &v); err != nil {
		return nil, fmt.Errorf("target docker:%s: GET /version: %v", addr, err)
	}
	t.version, t.api = v.Version, v.APIVersion
	return t, nil
}

func (t *Docker) String() string { return "docker:" + t.sock }

// Close implements Target.
func (t *Docker) Close() error { t.hc.CloseIdleConnections(); return nil }

// Version is the engine's version (GET /version).
func (t *Docker) Version() string { return t.version }

// NoZstd implements ZstdChecker: zstd layers load from Docker 23.0 on.
func (t *Docker) NoZstd(ctx context.Context) string {
	if major, ok := leadingInt(t.version); ok && major < 23 {
		return fmt.Sprintf("the Docker engine at %s is %s, and Docker before 23.0 cannot load zstd layers (upgrade to Docker 23.0 or later)", t.sock, t.version)
	}
	return ""
}

func leadingInt(s string) (int, bool) {
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	n, err := strconv.Atoi(s[:i])
	return n, err == nil
}

type dockerError struct {
	code int
	msg  string
}

func (e *dockerError) Error() string { return fmt.Sprintf("%d: %s", e.code, e.msg) }

func (t *Docker) do(ctx context.Context, method, path string, body io.Reader, hdr http.Header) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, "http://docker"+path, body)
	if err != nil {
		return nil, err
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	resp, err := t.hc.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode/100 != 2 {
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		var m struct {
			Message string `json:"message"`
		}
		msg := strings.TrimSpace(string(b))
		if json.Unmarshal(b, &m) == nil && m.Message != "" {
			msg = m.Message
		}
		return nil, &dockerError{code: resp.StatusCode, msg: msg}
	}
	return resp, nil
}

func (t *Docker) getJSON(ctx context.Context, path string, v any) error {
	resp, err := t.do(ctx, http.MethodGet, path, nil, nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return json.NewDecoder(io.LimitReader(resp.Body, 64<<20)).Decode(v)
}

type dockerImage struct {
	ID     string `json:"Id"`
	RootFS struct {
		Layers []string `json:"Layers"`
	} `json:"RootFS"`
}

// inspect returns the engine's image named ref (nil when it has none).
func (t *Docker) inspect(ctx context.Context, ref string) (*dockerImage, error) {
	var im dockerImage
	err := t.getJSON(ctx, "/images/"+url.PathEscape(ref)+"/json", &im)
	var de *dockerError
	if errors.As(err, &de) && de.code == http.StatusNotFound {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("target %s: GET /images/%s/json: %v", t, ref, err)
	}
	return &im, nil
}

// chains lists the layer chain IDs the engine holds, from the RootFS of
// every image it has (GET /images/json, then each image's inspect).
func (t *Docker) chains(ctx context.Context) (map[digest.Digest]bool, error) {
	var list []struct {
		ID string `json:"Id"`
	}
	if err := t.getJSON(ctx, "/images/json?all=1", &list); err != nil {
		return nil, fmt.Errorf("target %s: GET /images/json: %v", t, err)
	}
	have := map[digest.Digest]bool{}
	for _, e := range list {
		im, err := t.inspect(ctx, e.ID)
		if err != nil {
			return nil, err
		}
		if im == nil {
			continue // removed meanwhile
		}
		var chain digest.Digest
		for _, l := range im.RootFS.Layers {
			chain = chainID(chain, digest.Digest(l))
			have[chain] = true
		}
	}
	return have, nil
}

// chainID is the OCI image spec's ChainID step.
func chainID(parent, diffID digest.Digest) digest.Digest {
	if parent == "" {
		return diffID
	}
	return digest.FromString(parent.String() + " " + diffID.String())
}

// Free is the engine's root directory, when this host can
// see it (GET /info DockerRootDir).
func (t *Docker) Free(ctx context.Context) (string, int64, error) {
	var info struct {
		DockerRootDir string `json:"DockerRootDir"`
	}
	if err := t.getJSON(ctx, "/info", &info); err != nil {
		return "", 0, err
	}
	if info.DockerRootDir == "" {
		return "", 0, errors.New("no DockerRootDir")
	}
	n, err := preflight.Free(info.DockerRootDir)
	return info.DockerRootDir, n, err
}

// complete says whether the engine holds img under its name with the
// config's diff IDs.
func (t *Docker) complete(ctx context.Context, img warm.Image, cfg *v1.ConfigFile) (bool, error) {
	im, err := t.inspect(ctx, dockerName(img))
	if err != nil || im == nil {
		return false, err
	}
	if im.ID != img.Config.Digest.String() || len(im.RootFS.Layers) != len(cfg.RootFS.DiffIDs) {
		return false, nil
	}
	for i, d := range cfg.RootFS.DiffIDs {
		if im.RootFS.Layers[i] != d.String() {
			return false, nil
		}
	}
	return true, nil
}

// dockerName is what the engine calls the image: the reference for a tag,
// the image ID (config digest) for a digest reference, which docker load
// cannot tag.
func dockerName(img warm.Image) string {
	if strings.Contains(img.Name, "@") {
		return img.Config.Digest.String()
	}
	return img.Name
}

// Verify implements Verifier: every image complete in the engine.
func (t *Docker) Verify(ctx context.Context, s *warm.Set) error {
	for _, img := range s.Images {
		cfg, err := s.ConfigFile(img)
		if err != nil {
			return err
		}
		ok, err := t.complete(ctx, img, cfg)
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("target %s: image %s is not complete in the engine after the load", t, img.Name)
		}
	}
	return nil
}

// plan is one image the engine lacks, and per layer whether the archive
// carries it (the engine holds no chain up to it).
type plan struct {
	img  warm.Image
	send []bool
}

// plans lists the images of s the engine lacks: complete images are
// skipped, and a layer whose chain the engine already holds (from any of
// its images) is left out of the archive.
func (t *Docker) plans(ctx context.Context, s *warm.Set) ([]plan, error) {
	have, err := t.chains(ctx)
	if err != nil {
		return nil, err
	}
	var plans []plan
	for _, img := range s.Images {
		cfg, err := s.ConfigFile(img)
		if err != nil {
			return nil, err
		}
		ok, err := t.complete(ctx, img, cfg)
		if err != nil {
			return nil, err
		}
		if ok {
			continue
		}
		p := plan{img: img, send: make([]bool, len(img.Layers))}
		var chain digest.Digest
		for i := range img.Layers {
			chain = chainID(chain, digest.Digest(cfg.RootFS.DiffIDs[i].String()))
			p.send[i] = !have[chain]
		}
		plans = append(plans, p)
	}
	return plans, nil
}

// Plan implements warm.Loader: of each image the engine lacks, the layers
// to send (staged) and its config, manifest and index (written into the
// archive from the set).
func (t *Docker) Plan(ctx context.Context, s *warm.Set) (*warm.LoadPlan, error) {
	plans, err := t.plans(ctx, s)
	if err != nil {
		return nil, err
	}
	lp := &warm.LoadPlan{}
	missing := map[int]bool{}
	add := func(d digest.Digest) (*warm.Blob, bool) {
		b, bi := s.Blob(d)
		if bi < 0 || missing[bi] {
			return b, false
		}
		missing[bi] = true
		lp.Missing = append(lp.Missing, bi)
		return b, true
	}
	for _, p := range plans {
		for i, l := range p.img.Layers {
			if !p.send[i] {
				continue
			}
			if b, added := add(l.Digest); added {
				lp.Stage = append(lp.Stage, b)
			}
		}
		// The image's own metadata is what docker load records.
		for _, d := range []digest.Digest{p.img.Config.Digest, p.img.Manifest.Digest, p.img.Target.Digest} {
			add(d)
		}
	}
	return lp, nil
}

// Stage implements warm.Loader: the stage directory, an OCI layout
// (resumable partial files, verified commits), checked for the space the
// staged layers and docker load need.
func (t *Docker) Stage(ctx context.Context, s *warm.Set, p *warm.LoadPlan, checkSpace bool) (warm.Stage, error) {
	st, err := ocilayout.New(t.stage)
	if err != nil {
		return nil, fmt.Errorf("--docker-stage %s: %v", t.stage, err)
	}
	if checkSpace {
		var missing int64
		for _, i := range p.Missing {
			missing += s.Blobs[i].Size
		}
		if err := t.preflight(ctx, st, p.Stage, missing); err != nil {
			return nil, err
		}
	}
	return st, nil
}

// Load implements warm.Loader: each image the engine lacks is streamed
// into docker load from the stage.
func (t *Docker) Load(ctx context.Context, s *warm.Set, staged warm.Stage) error {
	plans, err := t.plans(ctx, s)
	if err != nil {
		return err
	}
	for _, p := range plans {
		if err := t.load(ctx, s, p.img, p.send, staged); err != nil {
			return err
		}
	}
	return nil
}

// Unstage implements warm.Loader: the set's layers leave the stage, then
// the stage itself when nothing else is staged there (another warm may
// share it); KeepStage keeps them.
func (t *Docker) Unstage(ctx context.Context, s *warm.Set, staged warm.Stage) error {
	if t.keepStage {
		return nil
	}
	for _, b := range s.Blobs {
		if b.Kind != warm.KindLayer {
			continue
		}
		if err := staged.Remove(b.Descriptor); err != nil {
			return fmt.Errorf("docker stage %s: %v", t.stage, err)
		}
	}
	if l, ok := staged.(*ocilayout.OCILayout); ok {
		if err := l.RemoveIfEmpty(); err != nil {
			return fmt.Errorf("docker stage %s: %v", t.stage, err)
		}
	}
	return nil
}

// preflight checks the free space for the staged layers (what the stage
// does not hold yet) and for the engine, which unpacks the archive into a
// temporary directory, then into its layer store (about twice the missing
// bytes). When both are on one file system their needs add up.
func (t *Docker) preflight(ctx context.Context, st warm.Stage, toStage []*warm.Blob, missing int64) error {
	var stageNeed int64
	for _, b := range toStage {
		stageNeed += b.Size - st.Held(b.Descriptor)
	}
	stageAvail, err := preflight.Free(t.stage)
	if err != nil {
		return fmt.Errorf("--docker-stage %s: %v", t.stage, err)
	}
	engineNeed := 2 * missing
	root, engineAvail, err := t.Free(ctx)
	if err != nil {
		// The engine's root is not visible from here (a remote socket):
		// only the stage can be checked.
		root, engineNeed = "", 0
	}
	if root != "" && sameDevice(root, t.stage) {
		if need := stageNeed + engineNeed; stageAvail < need {
			return fmt.Errorf("target %s: %w: %s to stage in %s plus about %s for docker load to unpack (twice the %s missing) = %s, %s free on that file system", t, preflight.ErrNoSpace,
				bytesize.Format(stageNeed), t.stage, bytesize.Format(engineNeed), bytesize.Format(missing), bytesize.Format(need), bytesize.Format(stageAvail))
		}
		return nil
	}
	if stageAvail < stageNeed {
		return fmt.Errorf("target %s: %w: %s to stage, %s free in %s (--docker-stage)", t, preflight.ErrNoSpace, bytesize.Format(stageNeed), bytesize.Format(stageAvail), t.stage)
	}
	if root != "" && engineAvail < engineNeed {
		return fmt.Errorf("target %s: %w: %s missing (docker load needs about twice that while it unpacks), %s free in %s", t, preflight.ErrNoSpace, bytesize.Format(missing), bytesize.Format(engineAvail), root)
	}
	return nil
}

// load streams img as a docker-archive into POST /images/load. A failure
// on kiln's side of the stream is a *warm.StageError: the engine loaded
// nothing.
func (t *Docker) load(ctx context.Context, s *warm.Set, img warm.Image, send []bool, st warm.Stage) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	pr, pw := io.Pipe()
	werr := make(chan error, 1)
	go func() {
		err := writeArchive(pw, s, img, send, st)
		pw.CloseWithError(err)
		werr <- err
	}()
	resp, err := t.do(ctx, http.MethodPost, "/images/load?quiet=1", pr, http.Header{"Content-Type": {"application/x-tar"}})
	if err != nil {
		pr.CloseWithError(err)
		if e := <-werr; e != nil {
			return stageError(img, e)
		}
		return fmt.Errorf("target %s: docker load of %s: %v", t, img.Name, err)
	}
	defer resp.Body.Close()
	// The answer is a JSON message stream; a failed load still answers
	// 200 and says so in an errorDetail.
	var loadErr string
	dec := json.NewDecoder(bufio.NewReader(resp.Body))
	for {
		var m struct {
			Stream      string `json:"stream"`
			Error       string `json:"error"`
			ErrorDetail struct {
				Message string `json:"message"`
			} `json:"errorDetail"`
		}
		if err := dec.Decode(&m); err != nil {
			if !errors.Is(err, io.EOF) && loadErr == "" {
				loadErr = err.Error()
			}
			break
		}
		if m.Error != "" && loadErr == "" {
			loadErr = m.Error
		}
	}
	// Docker has read the archive by the time it answers; a writer still
	// blocked would mean it did not, and the load failed.
	pr.Close()
	if e := <-werr; e != nil {
		return stageError(img, e)
	}
	if loadErr != "" {
		return fmt.Errorf("target %s: docker load of %s: %s", t, img.Name, loadErr)
	}
	return nil
}

// stageError is the archive writer's failure e as the engine sees it.
func stageError(img warm.Image, e error) error {
	se := &warm.StageError{Err: fmt.Errorf("image %s: %v (nothing was loaded)", img.Name, e)}
	var le *layerError
	if errors.As(e, &le) {
		se.Digest, se.BlobErr = le.digest, le.err
	}
	return se
}

// The roles Docker plays, checked at compile time: a target that silently
// lost one would still run, without its guarantee.
var (
	_ warm.Loader      = (*Docker)(nil)
	_ warm.ZstdChecker = (*Docker)(nil)
)
