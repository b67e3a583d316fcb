package resolvecmd

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kiln-build/kiln/cmd/kiln/internal/cmdutil"
	"github.com/kiln-build/kiln/recipes"
)

func TestResolveDataAge(t *testing.T) {
	f := filepath.Join("..", "..", "..", "testdata", "recipes", "torch25-cu124.yaml")
	db, _ := recipes.Data()
	date, _ := time.Parse(time.DateOnly, db.Date())
	resolveAt := func(days, maxAge int, asJSON bool) (string, string) {
		var out, errOut bytes.Buffer
		opts := &ResolveOptions{IO: &cmdutil.IO{Out: &out, ErrOut: &errOut}, File: f, JSON: asJSON, MaxDataAge: maxAge, Now: func() time.Time { return date.AddDate(0, 0, days) }}
		if err := runResolve(context.Background(), opts); err != nil {
			t.Fatal(err)
		}
		return out.String(), errOut.String()
	}
	o, _ := resolveAt(120, 90, true)
	var p struct {
		Warnings []string         `json:"warnings"`
		Data     recipes.PlanData `json:"data"`
	}
	if err := json.Unmarshal([]byte(o), &p); err != nil {
		t.Fatal(err)
	}
	if p.Data.AgeDays != 120 || !p.Data.Stale || p.Data.MaxAgeDays != 90 || !strings.Contains(strings.Join(p.Warnings, "|"), "120 days old") {
		t.Errorf("stale: %+v %v", p.Data, p.Warnings)
	}
	o, e := resolveAt(120, 365, false)
	// The table wraps at 80 columns: compare its words.
	words := func(s string) string { return strings.Join(strings.Fields(s), " ") }
	if !strings.Contains(words(o), "data "+db.Version()+" (embedded; torch and nvidia/cuda facts checked "+db.Date()+", 120 days ago)") || strings.Contains(e, "days old") {
		t.Errorf("not stale at 365:\n%s\n%s", o, e)
	}
	if _, e := resolveAt(100, 0, false); !strings.Contains(words(e), "warning: kiln's torch and nvidia/cuda data is 100 days old") {
		t.Errorf("default threshold: %s", e)
	}
	if code, _, _ := run(t, "resolve", f, "--max-data-age", "-3"); code != 2 {
		t.Errorf("negative --max-data-age: exit %d", code)
	}
}
