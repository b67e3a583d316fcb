package builder

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/kiln-build/kiln/layers"
	"github.com/kiln-build/kiln/recipes"
	"github.com/moby/buildkit/client/llb"
	digest "github.com/opencontainers/go-digest"
	ocispecs "github.com/opencontainers/image-spec/specs-go/v1"
)

// ContextName is the name of the local build context (the recipe's directory)
// the app files are copied from.
const ContextName = "context"

// Inputs are what a build needs besides the plan.
type Inputs struct {
	RecipeHash string // recipe sha256, as a label
	LockDigest string // kiln.lock sha256, as a label ("" without a lock)
	// SourceDateEpoch fixes the config's created time, copied files' times
	// and the times of the files each run step writes (runArgs).
	SourceDateEpoch *int64
	// AppDigest is the app files' content digest (AppDigest), recorded
	// in the image's layers.LabelInputs so that --explain can say an app change
	// is one; "" leaves it out.
	AppDigest string `json:",omitempty"`
	// CachedWheels are the compiled wheels a wheel cache answered, by
	// platform (os/arch) and project: the file name in the WheelsName
	// local context. Their Compile steps become copies of those files.
	// Not in the content tag (json "-"): a cached wheel changes no image.
	CachedWheels map[WheelSlot]string `json:"-"`
	// CachedWheelDigests are those wheels' sha256 digests, recorded in
	// the provenance (kiln:cached-wheel.PROJECT.OS/ARCH): a cached wheel is
	// code in the image that no step of the build compiled.
	CachedWheelDigests map[WheelSlot]string `json:"-"`
	// SourceHashes pin the source archives the Compile steps build from,
	// by project: the sha256 (hex) their wheel cache keys name. pip
	// refuses an archive with another digest (--require-hashes), so a
	// wheel pushed under a key was compiled from the source that key
	// names. Not in the content tag: the same source gives the same image.
	SourceHashes map[string]string `json:"-"`
}

// WheelSlot names one compiled wheel of a build: a project on a platform.
type WheelSlot struct {
	Platform string // os/arch[/variant]
	Package  string // flash-attn
}

// WheelsName is the local context holding the wheels fetched from the
// wheel cache.
const WheelsName = "kiln-wheels"

// CompiledWheel is a wheel the graph compiles: State holds the wheel file
// alone, at its root, once the Compile step has run.
type CompiledWheel struct {
	Package string
	State   llb.State
}

// Graph is the LLB for one platform.
type Graph struct {
	Platform ocispecs.Platform
	Layout   *Layout
	Devel    llb.State
	Runtime  llb.State // the image
	Probe    llb.State // the runtime image with the recipe's test commands run on it
	HasProbe bool
	// Compiled are the wheels this graph compiles from source (none that
	// the wheel cache answered).
	Compiled []CompiledWheel
}

// ParsePlatform parses os/arch[/variant] (the same syntax every kiln
// command takes) into BuildKit's platform type.
func ParsePlatform(s string) (ocispecs.Platform, error) {
	p, err := layers.ParsePlatform(s)
	if err != nil {
		return ocispecs.Platform{}, err
	}
	return ocispecs.Platform{OS: p.OS, Architecture: p.Architecture, Variant: p.Variant}, nil
}

// Graphs builds the graph of each platform: platforms, else the plan's,
// else linux/amd64.
func Graphs(p *recipes.Plan, in Inputs, platforms []string) ([]*Graph, error) {
	var gs []*Graph
	for _, ps := range buildPlatforms(p, platforms) {
		pl, err := ParsePlatform(ps)
		if err != nil {
			return nil, err
		}
		g, err := NewGraph(p, in, pl)
		if err != nil {
			return nil, err
		}
		gs = append(gs, g)
	}
	return gs, nil
}

// Target is the state a build solves: the runtime image with the recipe's
// test commands run on it, unless there are none or they are skipped.
func (g *Graph) Target(noProbes bool) llb.State {
	if g.HasProbe && !noProbes {
		return g.Probe
	}
	return g.Runtime
}

// PlatformString is os/arch[/variant].
func PlatformString(p ocispecs.Platform) string {
	s := p.OS + "/" + p.Architecture
	if p.Variant != "" {
		s += "/" + p.Variant
	}
	return s
}

// NewGraph builds the LLB graph of plan for one platform.
func NewGraph(p *recipes.Plan, in Inputs, platform ocispecs.Platform) (*Graph, error) {
	L, err := lowerPinned(p, in)
	if err != nil {
		return nil, err
	}
	if err := L.checkDownloads(PlatformString(platform)); err != nil {
		return nil, err
	}
	return graphFor(L, p, in, platform), nil
}

// checkDownloads refuses a platform a download has no file for (a build
// for a platform the plan was not resolved for).
func (L *Layout) checkDownloads(platform string) error {
	for _, st := range []Stage{L.Devel, L.Runtime} {
		for _, step := range st.Steps {
			for _, m := range step.Mounts {
				if m.Kind != MountDownload {
					continue
				}
				if _, ok := m.Download.For(platform); !ok {
					var have []string
					for k := range m.Download.Files {
						have = append(have, k)
					}
					sort.Strings(have)
					return fmt.Errorf("builder: the plan has no %s download for %s (it has %s): add %s to the recipe's platforms and resolve (or lock) again", m.Download.What, platform, strings.Join(have, ", "), platform)
				}
			}
		}
	}
	return nil
}

// graphFor renders a layout (Lower's, or one whose installs SplitComponent
// split) as the LLB of one platform.
func graphFor(L *Layout, p *recipes.Plan, in Inputs, platform ocispecs.Platform) *Graph {
	g := &Graph{Platform: platform, Layout: L}
	g.Devel = stageState(L.Devel, platform, in, nil, g)
	g.Runtime = stageState(L.Runtime, platform, in, map[string]llb.State{"devel": g.Devel}, g)
	if p.App != nil && p.App.Workdir != "" {
		g.Runtime = g.Runtime.Dir(p.App.Workdir)
	}
	g.Probe = g.Runtime
	for i, cmd := range L.Probes {
		g.Probe = g.Probe.Run(
			llb.Args([]string{"/bin/sh", "-c", cmd}),
			llb.WithCustomName(fmt.Sprintf("test %d/%d: %s", i+1, len(L.Probes), cmd)),
		).Root()
		g.HasProbe = true
	}
	return g
}

func stageState(st Stage, platform ocispecs.Platform, in Inputs, stages map[string]llb.State, g *Graph) llb.State {
	s := llb.Image(st.Base, llb.Platform(platform), llb.WithCustomName(st.Name+": "+st.Base))
	for _, kv := range st.Env {
		s = s.AddEnv(kv[0], kv[1])
	}
	for _, step := range st.Steps {
		if step.IsFile() {
			s = s.File(fileAction(step, in), llb.WithCustomName(step.Name))
			continue
		}
		if c := step.Compile; c != nil {
			if file := in.CachedWheels[WheelSlot{PlatformString(platform), c.Package}]; file != "" {
				s = s.File(cachedWheelCopy(c, file, in), llb.WithCustomName(CachedStepName(c.Package)))
				continue
			}
		}
		opts := []llb.RunOption{
			llb.Args(runArgs(step, in.SourceDateEpoch)),
			llb.WithCustomName(step.Name),
		}
		if step.HostNetwork {
			opts = append(opts, llb.Network(llb.NetModeHost))
		}
		for _, m := range step.Mounts {
			switch m.Kind {
			case MountCache:
				mode := llb.CacheMountShared
				if m.Locked {
					mode = llb.CacheMountLocked
				}
				opts = append(opts, llb.AddMount(m.Target, llb.Scratch(), llb.AsPersistentCacheDir(m.ID, mode)))
			case MountBind:
				opts = append(opts, llb.AddMount(m.Target, stages[m.ID], llb.SourcePath(m.Source), llb.Readonly))
			case MountDownload:
				f, _ := m.Download.For(PlatformString(platform))
				dl := llb.HTTP(f.URL, llb.Checksum(digest.NewDigestFromEncoded(digest.SHA256, f.SHA256)), llb.Filename(m.Download.File),
					llb.WithCustomName("download "+m.Download.What+": "+f.URL))
				opts = append(opts, llb.AddMount(m.Target, dl, llb.Readonly))
			case MountTools:
				tools := llb.Local(ToolsName,
					llb.IncludePatterns([]string{ToolsBinary, ToolsBundle}),
					llb.SharedKeyHint(ToolsName),
					llb.LocalUniqueID("kiln-"+ToolsName),
					llb.WithCustomName("kiln tools"),
				)
				opts = append(opts, llb.AddMount(m.Target, tools, llb.Readonly))
			}
		}
		s = s.Run(opts...).Root()
		if c := step.Compile; c != nil {
			wheel := llb.Scratch().File(llb.Copy(s, path.Join(c.Dir, c.Glob), "/", &llb.CopyInfo{AllowWildcard: true}),
				llb.WithCustomName("export "+c.Package+" wheel"))
			g.Compiled = append(g.Compiled, CompiledWheel{Package: c.Package, State: wheel})
		}
	}
	return s
}

// CachedStepName names the step that copies a cached wheel where its
// Compile step would have written it.
func CachedStepName(pkg string) string { return "devel: " + pkg + " from the wheel cache" }

// runArgs is the command of a run step. With an epoch, the step's shell
// runs inside clampScript, which sets every file the step wrote to it:
// the layer a step makes is then the same bytes on every build, and the
// exporter has no timestamps to rewrite (BuildKit's rewrite-timestamp
// decoded and encoded every kiln layer again at every export: 73 s of a
// no-op rebuild of the default recipe on two cores).
func runArgs(step Step, epoch *int64) []string {
	if epoch == nil {
		return []string{"/bin/sh", "-c", step.Shell}
	}
	return []string{"/bin/sh", "-c", clampScript("/", stepMarker, "/proc/self/mountinfo", *epoch), "kiln-step", step.Shell}
}

// stepError is err with each failed run step named by its own command:
// BuildKit names a process that failed by its arguments ("process %q did
// not complete successfully"), and runArgs put the step's shell after
// clampScript's. The error is still err underneath (Unwrap).
func stepError(err error, epoch *int64) error {
	if err == nil || epoch == nil {
		return err
	}
	prefix := strconv.Quote(strings.Join(runArgs(Step{}, epoch), " "))
	prefix = prefix[:len(prefix)-1] // the quoted command up to the step's shell
	msg := err.Error()
	if !strings.Contains(msg, prefix) {
		return err
	}
	return &namedStepError{msg: strings.ReplaceAll(msg, prefix, `"/bin/sh -c `), err: err}
}

type namedStepError struct {
	msg string
	err error
}

func (e *namedStepError) Error() string { return e.msg }
func (e *namedStepError) Unwrap() error { return e.err }

// stepMarker is where clampScript notes the step's start: /dev/shm is a
// tmpfs the runtime mounts in every step (BuildKit's OCI spec), never in
// the layer, and writable whatever the user.
const stepMarker = "/dev/shm/.kiln-step-start"

// clampScript runs the shell in $1 and then sets the modification time of
// every file under root it created or changed to epoch, as BuildKit's
// rewrite-timestamp would in the layer: anything newer than marker, which
// is dated a second before the step starts (a file's time is coarser than
// the clock: one written in the marker's tick would not be newer than
// it). Every mount point mountinfo lists but root is left alone, with
// what is under it: the step's cache and bind mounts, and the files
// BuildKit binds read-only over the image's (/etc/hosts,
// /etc/resolv.conf), which are not in the layer (mountinfo writes a
// space as \040: kiln's mount targets have none). Files a step unpacks
// with their archive's times keep them: those are the same on every
// build. A step that fails exits with its status; a file that cannot be
// set fails the step, which would otherwise not be reproducible.
func clampScript(root, marker, mountinfo string, epoch int64) string {
	m := shq(marker)
	return strings.Join([]string{
		`s=$1`,
		`touch -d "@$(($(date +%s) - 1))" ` + m + ` || exit`,
		`/bin/sh -c "$s" || exit`,
		`set --`,
		`while read -r _ _ _ _ p _; do [ "$p" = ` + shq(root) + ` ] || set -- "$@" -o -path "$p"; done < ` + shq(mountinfo),
		fmt.Sprintf(`find %s -xdev \( -path %s "$@" \) -prune -o -newer %s -exec touch -h -d @%d {} + || { echo "kiln: could not set the files this step wrote to SOURCE_DATE_EPOCH (%d): the layer would differ between builds" >&2; exit 1; }`,
			shq(root), m, m, epoch, epoch),
		`rm -f ` + m,
	}, "\n")
}

// cachedWheelCopy copies file from the WheelsName context into the
// Compile step's directory.
func cachedWheelCopy(c *Compile, file string, in Inputs) *llb.FileAction {
	var created *time.Time
	if in.SourceDateEpoch != nil {
		t := time.Unix(*in.SourceDateEpoch, 0).UTC()
		created = &t
	}
	src := llb.Local(WheelsName,
		llb.IncludePatterns([]string{file}),
		llb.SharedKeyHint(WheelsName),
		llb.LocalUniqueID("kiln-"+WheelsName),
		llb.WithCustomName("wheels from the wheel cache"),
	)
	return llb.Copy(src, "/"+file, c.Dir+"/"+file, &llb.CopyInfo{CreateDestPath: true, CreatedTime: created})
}

// fileAction is a file step: its copies from the build context, then its
// directories.
func fileAction(step Step, in Inputs) *llb.FileAction {
	var created *time.Time
	if in.SourceDateEpoch != nil {
		t := time.Unix(*in.SourceDateEpoch, 0).UTC()
		created = &t
	}
	var fa *llb.FileAction
	if len(step.Copies) > 0 {
		var patterns []string
		for _, c := range step.Copies {
			patterns = append(patterns, strings.TrimPrefix(path.Clean("/"+c.Src), "/"))
		}
		ctx := llb.Local(ContextName,
			llb.IncludePatterns(patterns),
			llb.SharedKeyHint(ContextName),
			llb.LocalUniqueID("kiln-"+ContextName),
			llb.WithCustomName("app files"),
		)
		for _, c := range step.Copies {
			info := &llb.CopyInfo{
				CopyDirContentsOnly: true,
				CreateDestPath:      true,
				AllowWildcard:       true,
				FollowSymlinks:      true,
				CreatedTime:         created,
			}
			src := "/" + strings.TrimPrefix(path.Clean("/"+c.Src), "/")
			if fa == nil {
				fa = llb.Copy(ctx, src, c.Dst, info)
			} else {
				fa = fa.Copy(ctx, src, c.Dst, info)
			}
		}
	}
	for _, d := range step.Dirs {
		opts := []llb.MkdirOption{llb.WithParents(true)}
		if created != nil {
			opts = append(opts, llb.WithCreatedTime(*created))
		}
		if fa == nil {
			fa = llb.Mkdir(d, 0o755, opts...)
		} else {
			fa = fa.Mkdir(d, 0o755, opts...)
		}
	}
	return fa
}

// Marshal marshals st for the graph's platform.
func (g *Graph) Marshal(ctx context.Context, st llb.State) (*llb.Definition, error) {
	return st.Marshal(ctx, llb.Platform(g.Platform))
}

// DefinitionDigest is a stable digest over a marshalled definition: the
// sha256 of its ops in order (each op is itself content addressed).
func DefinitionDigest(def *llb.Definition) string {
	h := sha256.New()
	for _, dt := range def.Def {
		s := sha256.Sum256(dt)
		h.Write(s[:])
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}

// PlatformOrDefault is the plan's first platform, or linux/amd64.
func PlatformOrDefault(p *recipes.Plan) ocispecs.Platform {
	if len(p.Platforms) > 0 {
		if pl, err := ParsePlatform(p.Platforms[0]); err == nil {
			return pl
		}
	}
	return ocispecs.Platform{OS: "linux", Architecture: "amd64"}
}
