package builder

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/moby/buildkit/client"
	"github.com/moby/buildkit/util/progress/progressui"
)

// ProgressMode is how a build shows BuildKit's progress: auto (a live
// display on a terminal, lines otherwise), tty, plain, rawjson (BuildKit's
// status as JSON lines) or quiet.
type ProgressMode string

// The progress modes.
const (
	ProgressAuto    ProgressMode = "auto"
	ProgressTTY     ProgressMode = "tty"
	ProgressPlain   ProgressMode = "plain"
	ProgressRawJSON ProgressMode = "rawjson"
	ProgressQuiet   ProgressMode = "quiet"
)

// progressWords maps every accepted spelling to its mode: kiln's
// --progress words (auto, tty, plain, none) and their old aliases (bars,
// quiet), and BuildKit's rawjson.
var progressWords = map[string]ProgressMode{
	"": ProgressAuto, "auto": ProgressAuto, "tty": ProgressTTY, "bars": ProgressTTY,
	"plain": ProgressPlain, "rawjson": ProgressRawJSON, "none": ProgressQuiet, "quiet": ProgressQuiet,
}

// ParseProgress reads a --progress value: the one check of it.
func ParseProgress(s string) (ProgressMode, error) {
	if m, ok := progressWords[s]; ok {
		return m, nil
	}
	return "", fmt.Errorf("--progress: %q is not one of auto, tty, plain, none (or rawjson, BuildKit's status as JSON)", s)
}

// display forwards BuildKit's status to the progress display while
// counting the graph's steps: only the graph's own steps count; resolving
// bases, sending the context and exporting are not build steps.
type display struct {
	mode  ProgressMode
	w     io.Writer
	steps map[string]bool
	ui    progressui.Display
	show  bool
}

func newDisplay(mode ProgressMode, w io.Writer, graphs []*Graph) (*display, error) {
	if _, err := ParseProgress(string(mode)); err != nil {
		return nil, err
	}
	if w == nil {
		w = os.Stderr
	}
	d := &display{mode: progressWords[string(mode)], w: w, steps: map[string]bool{}}
	for _, g := range graphs {
		for _, st := range []Stage{g.Layout.Devel, g.Layout.Runtime} {
			for _, s := range st.Steps {
				d.steps[s.Name] = true
				if s.Compile != nil {
					d.steps[CachedStepName(s.Compile.Package)] = true
				}
			}
		}
	}
	var err error
	if d.ui, d.show, err = d.newUI(); err != nil {
		return nil, fmt.Errorf("--progress %s: %w", mode, err)
	}
	return d, nil
}

func (d *display) isStep(name string) bool {
	// Split installs are named once the devel stage is built.
	return d.steps[name] || strings.HasPrefix(name, "test ") || strings.HasPrefix(name, "runtime: install ")
}

// newUI is BuildKit's progress display for the mode (none for quiet): a
// writer that is not a terminal gets plain lines in auto and tty modes.
func (d *display) newUI() (progressui.Display, bool, error) {
	mode := d.mode
	if mode == ProgressQuiet {
		return progressui.Display{}, false, nil
	}
	if cons, ok := d.w.(*os.File); ok {
		disp, err := progressui.NewDisplay(cons, progressui.DisplayMode(mode))
		return disp, true, err
	}
	if mode == ProgressAuto || mode == ProgressTTY {
		mode = ProgressPlain
	}
	disp, err := progressui.NewDisplay(d.w, progressui.DisplayMode(mode))
	return disp, true, err
}

// run shows the statuses from ch until it is closed and counts the steps.
func (d *display) run(ctx context.Context, ch <-chan *client.SolveStatus) Stats {
	var st Stats
	completed := map[string]bool{}
	cached := map[string]bool{}
	seen := map[string]bool{}
	forward := make(chan *client.SolveStatus)
	done := make(chan error, 1)
	go func() {
		if d.show {
			_, err := d.ui.UpdateFrom(context.WithoutCancel(ctx), forward)
			done <- err
			return
		}
		for range forward {
		}
		done <- nil
	}()
	for s := range ch {
		for _, v := range s.Vertexes {
			k := v.Digest.String()
			if !d.isStep(v.Name) {
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
	st.Vertices = len(seen)
	st.Cached = len(cached)
	for k := range completed {
		if !cached[k] {
			st.Executed++
		}
	}
	return st
}
