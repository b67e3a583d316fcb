package builder

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/kiln-build/kiln/internal/termtable"
	"github.com/kiln-build/kiln/recipes"
)

// DryRun is what a build would do (kiln build --dry-run): the plan, each
// platform's graph digest, the steps and the tests; nothing is built.
type DryRun struct {
	Plan   *recipes.Plan
	Graphs []DryGraph
	Layout *Layout
}

// DryGraph is one platform's graph.
type DryGraph struct {
	Platform string `json:"platform"`
	Digest   string `json:"graph_digest"`
	Ops      int    `json:"ops"`
}

// Dry makes the graphs of plan for platforms (default: the plan's),
// without the tests with noTest.
func Dry(ctx context.Context, plan *recipes.Plan, in Inputs, platforms []string, noTest bool) (*DryRun, error) {
	gs, err := Graphs(plan, in, platforms)
	if err != nil {
		return nil, err
	}
	d := &DryRun{Plan: plan}
	for _, g := range gs {
		d.Layout = g.Layout
		def, err := g.Marshal(ctx, g.Target(noTest))
		if err != nil {
			return nil, err
		}
		d.Graphs = append(d.Graphs, DryGraph{Platform: PlatformString(g.Platform), Digest: DefinitionDigest(def), Ops: len(def.Def)})
	}
	if d.Layout == nil {
		return nil, errors.New("no platform to build")
	}
	return d, nil
}

// JSON is the dry run as --json prints it.
func (d *DryRun) JSON() map[string]any {
	var steps []map[string]string
	for _, st := range []Stage{d.Layout.Devel, d.Layout.Runtime} {
		for _, s := range st.Steps {
			steps = append(steps, map[string]string{"stage": st.Name, "name": s.Name, "component": string(s.Component)})
		}
	}
	return map[string]any{"plan": d.Plan, "graphs": d.Graphs, "steps": steps, "tests": nonNil(d.Layout.Probes)}
}

// WriteText prints the dry run within width columns: a value too long
// wraps under itself; the full values are in JSON.
func (d *DryRun) WriteText(w io.Writer, width int) {
	var b strings.Builder
	d.Plan.WriteTable(&b)
	termtable.Labeled(w, width, 14, b.String())
	fmt.Fprintln(w)
	for _, st := range []Stage{d.Layout.Devel, d.Layout.Runtime} {
		termtable.Fprintw(w, width, "stage "+st.Name+"  ", "        ", "FROM "+st.Base)
		for _, s := range st.Steps {
			c := ""
			if s.Component != "" {
				c = "  [layer: " + string(s.Component) + "]"
			}
			termtable.Fprintw(w, width, "  - ", "    ", s.Name+c)
		}
	}
	for _, t := range d.Layout.Probes {
		termtable.Fprintw(w, width, "test  ", "      ", t)
	}
	for _, g := range d.Graphs {
		fmt.Fprintf(w, "graph %s  %s (%d ops)\n", g.Platform, termtable.Digest(g.Digest), g.Ops)
	}
}
