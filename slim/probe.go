package slim

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	ctdcontent "github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/plugins/content/local"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/moby/buildkit/client"
	"github.com/moby/buildkit/client/llb"
	"github.com/moby/buildkit/util/entitlements"
	"github.com/tonistiigi/fsutil"

	"github.com/kiln-build/kiln/internal/scratch"
)

// ProbeSource is where BuildKit reads the probed image: Ref (NAME@DIGEST)
// in the OCI layout at Layout on this machine, sent to the daemon through
// the solve's session (nothing is pushed anywhere), or, with Layout empty,
// a registry reference the daemon pulls, pinned by digest.
type ProbeSource struct {
	Ref    string
	Layout string
}

// probeStore is the session's name for the layout's content store.
const probeStore = "kiln-slim-probe"

// state is the image as an LLB source, and the solve options that serve it.
func (s ProbeSource) state(opt *client.SolveOpt) (llb.State, error) {
	if s.Layout == "" {
		return llb.Image(s.Ref, llb.WithCustomName("kiln slim probe image "+s.Ref)), nil
	}
	store, err := local.NewStore(s.Layout)
	if err != nil {
		return llb.State{}, fmt.Errorf("probe: the image's layout %s: %w", s.Layout, err)
	}
	opt.OCIStores = map[string]ctdcontent.Store{probeStore: store}
	return llb.OCILayout(s.Ref, llb.OCIStore("", probeStore), llb.WithCustomName("kiln slim probe image "+s.Ref)), nil
}

// Probe runs cmd with /bin/sh -c in the image src names with the image's
// environment, working directory and user, as a real execution: a
// non-zero exit fails it, and the error carries the tail of the command's
// output.
func Probe(ctx context.Context, c *client.Client, src ProbeSource, cfg *v1.ConfigFile, cmd string) error {
	_, err := probe(ctx, c, src, cfg, cmd, "")
	return err
}

// The probe container's mounts when it records: the kiln-tools context
// (a directory holding a static kiln as "kiln", as builder.ToolsDir makes
// it) and the directory the list comes back in.
const (
	recordTools  = "/kiln-tools"
	recordOut    = "/kiln-probe-out"
	recordedList = "opened"
)

// ProbeRecord is Probe that also returns the startup set: the files the
// probe's processes opened in the image, as absolute paths, sorted (see
// RecordOpens for how and why). tools is a directory holding a statically
// linked kiln named "kiln"; it is mounted into the probe container, which
// runs privileged (BuildKit's security.insecure entitlement: fanotify
// needs CAP_SYS_ADMIN), the recorder as root and cmd as the image's user.
func ProbeRecord(ctx context.Context, c *client.Client, src ProbeSource, cfg *v1.ConfigFile, cmd, tools string) ([]string, error) {
	if tools == "" {
		return nil, fmt.Errorf("probe: recording the startup set needs the kiln tools directory")
	}
	return probe(ctx, c, src, cfg, cmd, tools)
}

// forgetProbed drops the probed image from BuildKit's cache once the probe
// ran: its layers, which the daemon took from the layout (or pulled) and
// unpacked, are the size of the image twice over (a CUDA app: 7 GB) and
// of no use after the probe (another probe of the same image takes them
// again). What goes is the records named after the image's digest
// ("pulled from NAME@DIGEST") and every record built on them (the probe
// container's own layer, never reused: the probe ignores the cache),
// which holds them while it exists. A failure leaves them to BuildKit's
// garbage collector, as before. It runs whatever the state of the probe's
// ctx, but an interrupted slim (Ctrl-C) makes one try, not waiting on
// records still in use.
func forgetProbed(probeCtx context.Context, c *client.Client, src ProbeSource) {
	_, dg, ok := strings.Cut(src.Ref, "@sha256:")
	if !ok || dg == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(probeCtx), 2*time.Minute)
	defer cancel()
	// The solve's records are released as its job ends, which may be a
	// moment after Solve returned (a failed solve's, later still): what
	// is still in use goes on a later try, backing off (~6 s in all).
	for wait := 100 * time.Millisecond; ; wait *= 2 {
		du, err := c.DiskUsage(ctx)
		if err != nil {
			return
		}
		gone := probedRecords(du, dg)
		if len(gone) == 0 || wait > 3*time.Second {
			return
		}
		var ids []string
		for id := range gone {
			ids = append(ids, "id=="+id)
		}
		// One prune: BuildKit drops the children, then their parents.
		_ = c.Prune(ctx, nil, client.WithFilter(ids))
		select {
		case <-ctx.Done():
			return
		case <-probeCtx.Done():
			return
		case <-time.After(wait):
		}
	}
}

// probedRecords are the IDs of the records named after digest hex dg and
// of every record descending from one of them.
func probedRecords(du []*client.UsageInfo, dg string) map[string]bool {
	gone := map[string]bool{}
	for _, r := range du {
		if strings.Contains(r.Description, dg) {
			gone[r.ID] = true
		}
	}
	for grew := len(gone) > 0; grew; {
		grew = false
		for _, r := range du {
			if gone[r.ID] {
				continue
			}
			for _, p := range r.Parents {
				if gone[p] {
					gone[r.ID], grew = true, true
					break
				}
			}
		}
	}
	return gone
}

func probe(ctx context.Context, c *client.Client, src ProbeSource, cfg *v1.ConfigFile, cmd, tools string) ([]string, error) {
	var opt client.SolveOpt
	st, err := src.state(&opt)
	if err != nil {
		return nil, err
	}
	var ro []llb.RunOption
	args := []string{"/bin/sh", "-c", cmd}
	user := ""
	if cfg != nil {
		user = cfg.Config.User
	}
	if tools != "" {
		rec := []string{recordTools + "/kiln", "probe-record", "--out", recordOut + "/" + recordedList}
		if user != "" {
			rec = append(rec, "--user", user)
		}
		args = append(append(rec, "--"), args...)
		user = ""
		ro = append(ro, llb.Security(llb.SecurityModeInsecure),
			llb.AddMount(recordTools, llb.Local("kiln-tools", llb.SharedKeyHint("kiln-tools"), llb.LocalUniqueID("kiln-probe-tools")), llb.Readonly))
	}
	ro = append(ro, llb.Args(args), llb.WithCustomName("kiln slim --probe: "+cmd), llb.IgnoreCache)
	if cfg != nil {
		for _, e := range cfg.Config.Env {
			if k, v, ok := strings.Cut(e, "="); ok {
				ro = append(ro, llb.AddEnv(k, v))
			}
		}
		if cfg.Config.WorkingDir != "" {
			ro = append(ro, llb.Dir(cfg.Config.WorkingDir))
		}
	}
	if user != "" {
		ro = append(ro, llb.User(user))
	}
	run := st.Run(ro...)
	out := run.Root()
	var outDir string
	if tools != "" {
		out = run.AddMount(recordOut, llb.Scratch())
		tfs, err := fsutil.NewFS(tools)
		if err != nil {
			return nil, fmt.Errorf("probe: kiln tools %s: %w", tools, err)
		}
		if outDir, err = scratch.Dir("", "kiln-probe-out"); err != nil {
			return nil, err
		}
		defer os.RemoveAll(outDir)
		opt.LocalMounts = map[string]fsutil.FS{"kiln-tools": tfs}
		opt.AllowedEntitlements = []string{entitlements.EntitlementSecurityInsecure.String()}
		opt.Exports = []client.ExportEntry{{Type: client.ExporterLocal, OutputDir: outDir}}
	}
	def, err := out.Marshal(ctx)
	if err != nil {
		return nil, err
	}
	ch := make(chan *client.SolveStatus)
	var logs strings.Builder
	done := make(chan struct{})
	go func() {
		defer close(done)
		for s := range ch {
			for _, l := range s.Logs {
				if logs.Len() < 1<<20 {
					logs.Write(l.Data)
				}
			}
		}
	}()
	_, err = c.Solve(ctx, def, opt, ch)
	<-done
	forgetProbed(ctx, c, src)
	if err != nil {
		out := strings.TrimSpace(logs.String())
		if len(out) > 2000 {
			out = "…" + out[len(out)-2000:]
		}
		msg := err.Error()
		if i := strings.Index(msg, "\n"); i > 0 {
			msg = msg[:i]
		}
		if out != "" {
			return nil, fmt.Errorf("probe %q failed: %s\n%s", cmd, msg, out)
		}
		return nil, fmt.Errorf("probe %q failed: %s", cmd, msg)
	}
	if tools == "" {
		return nil, nil
	}
	b, err := os.ReadFile(filepath.Join(outDir, recordedList))
	if err != nil {
		return nil, fmt.Errorf("probe: the recorder's list: %w", err)
	}
	var files []string
	for _, l := range strings.Split(string(b), "\n") {
		// The recorder's own mounts are not the image's.
		if l != "" && !strings.HasPrefix(l, recordTools+"/") && !strings.HasPrefix(l, recordOut+"/") {
			files = append(files, l)
		}
	}
	return files, nil
}
