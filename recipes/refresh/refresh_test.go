package refresh

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/kiln-build/kiln/recipes"
	"github.com/kiln-build/kiln/recipes/refresh/refreshtest"
	"github.com/kiln-build/kiln/registry"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden")

var readDay = time.Date(2027, 1, 2, 3, 4, 5, 0, time.UTC)

func options(s *refreshtest.Set, db *recipes.DB) Options {
	return Options{
		Base:       db,
		IndexURL:   s.IndexURL(),
		MatrixURL:  s.MatrixURL(),
		Repository: s.Repository(),
		HTTP:       registry.HTTPClient(nil, registry.WithRetries(3, time.Millisecond)),
		Remote:     []remote.Option{remote.WithRetryBackoff(remote.Backoff{Duration: time.Millisecond, Factor: 1, Steps: 3})},
		Now:        func() time.Time { return readDay },
	}
}

func embedded(t *testing.T) *recipes.DB {
	t.Helper()
	db, err := recipes.Data()
	if err != nil {
		t.Fatal(err)
	}
	return db
}

// Stand-ins that agree with the embedded data give back the same facts:
// no change, and every release, variant, Python range, cuDNN (read from a
// release matrix in RELEASE.md's own format) and tag as embedded.
func TestRefreshAgreesWithEmbeddedData(t *testing.T) {
	db := embedded(t)
	s := refreshtest.New(t, db)
	// One busy answer from each source: retried, not fatal.
	s.Index.Fail["/whl/cu124/torch/"] = 1
	s.Hub.FailPage = 2
	f, err := Run(context.Background(), options(s, db))
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Changes) != 0 {
		var b bytes.Buffer
		WriteDiff(&b, f)
		t.Fatalf("changes against sources that agree with the embedded data:\n%s", b.String())
	}
	r := &run{o: &Options{IndexURL: "x", MatrixURL: "y"}, listURL: "z"}
	if a, b := r.facts(db.Torch, db.Images), r.facts(f.Torch, f.Images); len(a) != len(b) || len(a) < 100 {
		t.Errorf("facts: %d embedded, %d refreshed", len(a), len(b))
	}
	for i, rel := range f.Torch.Releases {
		base := db.Torch.Releases[i]
		if rel.Minor != base.Minor || len(rel.Variants) != len(base.Variants) {
			t.Fatalf("release %d: %s/%d variants, embedded %s/%d", i, rel.Minor, len(rel.Variants), base.Minor, len(base.Variants))
		}
		for j, v := range rel.Variants {
			bv := base.Variants[j]
			if v.CuDNN != bv.CuDNN || v.Stable != bv.Stable || v.Unofficial || v.Archs != bv.Archs || v.CXX11ABI != bv.CXX11ABI {
				t.Errorf("torch %s+%s: %+v, embedded %+v", rel.Minor, v.Name, v, bv)
			}
		}
	}
	if len(f.Images.Tags) != len(db.Images.Tags) || f.Images.DataDate != "2027-01-02" || f.Torch.DataDate != "2027-01-02" {
		t.Errorf("images: %d tags (embedded %d), dates %s %s", len(f.Images.Tags), len(db.Images.Tags), f.Images.DataDate, f.Torch.DataDate)
	}
	// The registry was read the Docker Hub way: a token, then pages.
	if s.Hub.Tokens == 0 || s.Hub.Pages < 6 || s.Hub.SawBadAuth {
		t.Errorf("registry: %d tokens, %d pages, bad auth %v", s.Hub.Tokens, s.Hub.Pages, s.Hub.SawBadAuth)
	}
	// Every variant index (8) was read for the three projects, plus the retry.
	if s.Index.Gets() != 8*3+1 {
		t.Errorf("index GETs: %d", s.Index.Gets())
	}
	if f.DataVersion != db.Version()+"+refresh.20270102" || f.BaseDataVersion != db.Version() || len(f.Sources) != 8*3+2 {
		t.Errorf("file: %s %s, %d sources", f.DataVersion, f.BaseDataVersion, len(f.Sources))
	}
	for _, src := range f.Sources {
		if strings.Contains(src.URL, s.Hub.Token) || src.Date != "2027-01-02" {
			t.Errorf("source %+v", src)
		}
	}
}

// A changed index and registry: what changed is listed, each with its
// source and date; the refreshed file loads and the resolver uses it.
func TestRefreshDiffForChangedSources(t *testing.T) {
	db := embedded(t)
	s := refreshtest.New(t, db)
	plat := "manylinux_2_28_x86_64"
	// torch 2.11.0+cu129: on the cu129 index, not in the release matrix.
	for py := 10; py <= 14; py++ {
		s.Index.Add("cu129", "torch", refreshtest.Wheel("torch", "2.11.0", "cu129", py, plat))
	}
	// torch 2.13.1 and a torchaudio 2.13 on the official variants.
	for _, v := range []string{"cu126", "cu130"} {
		for py := 10; py <= 14; py++ {
			s.Index.Add(v, "torch", refreshtest.Wheel("torch", "2.13.1", v, py, plat))
			s.Index.Add(v, "torchvision", refreshtest.Wheel("torchvision", "0.28.1", v, py, plat))
		}
	}
	for py := 10; py <= 14; py++ {
		s.Index.Add("cu130", "torchaudio", refreshtest.Wheel("torchaudio", "2.13.0", "cu130", py, plat), refreshtest.Wheel("torchaudio", "2.13.1", "cu130", py, plat))
	}
	// torchvision 0.20 gains cp313 wheels; torch 2.1+cu121 is withdrawn.
	for _, v := range []string{"cu118", "cu121", "cu124"} {
		s.Index.Add(v, "torchvision", refreshtest.Wheel("torchvision", "0.20.1", v, 13, plat))
	}
	s.Index.Remove("cu121", "torch", "torch-2.1.")
	// nvidia/cuda: 13.0.4 and 13.4.0 published, 11.4.3 deleted.
	s.Push("13.0.4-base-ubuntu24.04", "13.0.4-cudnn-devel-ubuntu24.04", "13.4.0-base-ubuntu24.04")
	refreshtest.DeleteTags(t, s.Reg, s.Hub, "11.4.3-base-ubuntu22.04", "11.4.3-runtime-ubuntu22.04", "11.4.3-devel-ubuntu22.04", "11.4.3-cudnn8-runtime-ubuntu22.04", "11.4.3-cudnn8-devel-ubuntu22.04")

	f, err := Run(context.Background(), options(s, db))
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := WriteDiff(&b, f); err != nil {
		t.Fatal(err)
	}
	got := strings.NewReplacer(s.IndexSrv.URL, "INDEX", s.MatrixS.URL, "MATRIX", strings.TrimPrefix(s.Reg.URL, "http://"), "REGISTRY").Replace(b.String())
	golden := filepath.Join("testdata", "changed.diff.golden")
	if *update {
		if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (go test ./recipes/refresh -run TestRefreshDiff -update)", err)
	}
	if got != string(want) {
		t.Errorf("diff differs from %s (-update if intended):\n%s", golden, got)
	}
	for _, c := range f.Changes {
		if c.Source == "" || c.Date != "2027-01-02" {
			t.Errorf("change without source or date: %+v", c)
		}
	}

	// The refreshed file, written and loaded, drives the resolver.
	p := filepath.Join(t.TempDir(), "compat.json")
	bs, _ := json.MarshalIndent(f, "", " ")
	if err := os.WriteFile(p, bs, 0o644); err != nil {
		t.Fatal(err)
	}
	rdb, err := recipes.LoadDataFile(p)
	if err != nil {
		t.Fatal(err)
	}
	resolve := func(y string) (*recipes.Plan, error) {
		r, err := recipes.Parse("kiln.yaml", []byte(y))
		if err != nil {
			t.Fatal(err)
		}
		return recipes.Resolve(context.Background(), r, recipes.WithData(rdb))
	}
	plan, err := resolve("name: a\ncuda: '13.0'\ntorch: {version: '2.13', torchaudio: true}\n")
	if err != nil || *plan.Torch != "2.13.1" || *plan.Torchaudio != "2.13.1" || plan.CUDA != "13.0.4" {
		t.Errorf("torch 2.13 on the refreshed data: %+v %v", plan, err)
	}
	if _, err := resolve("name: a\ncuda: '12.9'\ntorch: {version: 2.11.0}\n"); err == nil || !strings.Contains(err.Error(), "unofficial") {
		t.Errorf("2.11+cu129 offered: %v", err)
	}
	if _, err := resolve("name: a\ncuda: '12.4'\npython: '3.13'\ntorch: {version: 2.5.1, torchvision: true}\n"); err != nil {
		t.Errorf("torchvision 0.20 cp313 now listed: %v", err)
	}
	// The embedded data is still the default.
	if r, _ := recipes.Parse("kiln.yaml", []byte("name: a\ncuda: '13.0'\n")); r != nil {
		if plan, err := recipes.Resolve(context.Background(), r); err != nil || plan.CUDA != "13.0.3" {
			t.Errorf("embedded default: %v %v", plan, err)
		}
	}
}

func TestRefreshFailsOnUnreadableSource(t *testing.T) {
	db := embedded(t)
	s := refreshtest.New(t, db)
	o := options(s, db)
	o.MatrixURL = s.MatrixS.URL + "/missing.md"
	if _, err := Run(context.Background(), o); err == nil || !strings.Contains(err.Error(), "release matrix") || !strings.Contains(err.Error(), "404") {
		t.Errorf("missing matrix: %v", err)
	}
	o = options(s, db)
	o.Repository = strings.TrimPrefix(s.Reg.URL, "http://") + "/nvidia/cudax"
	if _, err := Run(context.Background(), o); err == nil || !strings.Contains(err.Error(), "nvidia/cuda tags") || strings.Contains(err.Error(), s.Hub.Token) {
		t.Errorf("wrong repository: %v", err)
	}
	o = options(s, db)
	o.Variants = []string{"cuda12"}
	if _, err := Run(context.Background(), o); err == nil || !strings.Contains(err.Error(), `variant "cuda12"`) {
		t.Errorf("bad variant: %v", err)
	}
	// A password in an index URL never reaches an error or a source.
	o = options(s, db)
	o.IndexURL = strings.Replace(s.IndexSrv.URL, "http://", "http://user:hunter2pass@", 1) + "/whl"
	f, err := Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	bs, _ := json.Marshal(f)
	if strings.Contains(string(bs), "hunter2pass") || strings.Contains(string(bs), "user:") {
		t.Error("index credentials in the refreshed data")
	}
}

// D10 and D7: a source that cannot be read fails the refresh, whatever
// shape the failure takes. A 404, an empty or a truncated torch page of a
// variant the data knows was written as "N removed", exit 0; a tag list
// whose Link: next points at itself was followed for ever.
func TestRefreshRefusesBrokenSources(t *testing.T) {
	db := embedded(t)
	variant := db.Torch.Releases[len(db.Torch.Releases)-1].Variants[0].Name
	run := func(t *testing.T, s *refreshtest.Set, o Options) error {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, err := Run(ctx, o)
		return err
	}
	t.Run("404", func(t *testing.T) {
		s := refreshtest.New(t, db)
		s.Index.Drop(variant, "torch")
		if err := run(t, s, options(s, db)); err == nil || !strings.Contains(err.Error(), "404") {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("empty page", func(t *testing.T) {
		s := refreshtest.New(t, db)
		s.Index.Remove(variant, "torch", "")
		if err := run(t, s, options(s, db)); err == nil || !strings.Contains(err.Error(), "lists no files") {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("truncated page", func(t *testing.T) {
		s := refreshtest.New(t, db)
		cut := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			rec := httptest.NewRecorder()
			s.Index.ServeHTTP(rec, r)
			b := rec.Body.Bytes()
			if strings.Contains(r.URL.Path, "/torch/") && strings.HasPrefix(rec.Header().Get("Content-Type"), "text/html") {
				b = b[:len(b)*2/3]
			}
			w.Header().Set("Content-Type", rec.Header().Get("Content-Type"))
			w.WriteHeader(rec.Code)
			w.Write(b)
		}))
		defer cut.Close()
		o := options(s, db)
		o.IndexURL = cut.URL + "/whl"
		// HTML pages must end their document (a JSON one would not parse).
		if err := run(t, s, o); err == nil || !strings.Contains(err.Error(), "cut short") {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("Link next loops", func(t *testing.T) {
		s := refreshtest.New(t, db)
		s.Hub.LoopNext = true
		if err := run(t, s, options(s, db)); err == nil || !strings.Contains(err.Error(), "loops") {
			t.Fatalf("err = %v", err)
		}
		if s.Hub.Pages > 3 {
			t.Fatalf("%d pages read", s.Hub.Pages)
		}
	})
}
