package slim

import (
	"context"
	"fmt"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/moby/buildkit/client"
	"github.com/moby/buildkit/client/llb"
)

// Probe runs cmd with /bin/sh -c in image ref (which the BuildKit daemon
// must be able to pull, pinned by digest) with the image's environment,
// working directory and user, as a real execution: a non-zero exit fails
// it, and the error carries the tail of the command's output.
func Probe(ctx context.Context, c *client.Client, ref string, cfg *v1.ConfigFile, cmd string) error {
	st := llb.Image(ref, llb.WithCustomName("kiln slim probe image "+ref))
	var ro []llb.RunOption
	ro = append(ro, llb.Args([]string{"/bin/sh", "-c", cmd}), llb.WithCustomName("kiln slim --probe: "+cmd), llb.IgnoreCache)
	if cfg != nil {
		for _, e := range cfg.Config.Env {
			if k, v, ok := strings.Cut(e, "="); ok {
				ro = append(ro, llb.AddEnv(k, v))
			}
		}
		if cfg.Config.WorkingDir != "" {
			ro = append(ro, llb.Dir(cfg.Config.WorkingDir))
		}
		if cfg.Config.User != "" {
			ro = append(ro, llb.User(cfg.Config.User))
		}
	}
	def, err := st.Run(ro...).Root().Marshal(ctx)
	if err != nil {
		return err
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
	_, err = c.Solve(ctx, def, client.SolveOpt{}, ch)
	<-done
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
			return fmt.Errorf("probe %q failed: %s\n%s", cmd, msg, out)
		}
		return fmt.Errorf("probe %q failed: %s", cmd, msg)
	}
	return nil
}
