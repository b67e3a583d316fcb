package testimage

import (
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Faulty wraps go-containerregistry's in-process registry and
// injects the faults a fetcher must survive, per blob GET. Set
// Faults before the requests; Ranges and Served are read under no lock once
// the requests are done.
type Faulty struct {
	mu     sync.Mutex
	Next   http.Handler
	Faults []string // consumed in order: "429", "503", "cut", "norange", "stall-head", "stall-body"
	Ranges []string // Range headers seen on blob GETs
	Served int64    // body bytes written for blob GETs
}

// ResumeFaults are the fault sequences after which a read must resume
// by Range and verify the whole blob (F5): a stall before the answer or
// mid-body, a connection cut mid-body, and a stall then a cut.
var ResumeFaults = [][]string{{"stall-head"}, {"stall-body"}, {"cut"}, {"stall-body", "cut"}}

// FaultyRegistry starts an in-process registry behind a Faulty, closed
// when the test ends, and returns the Faulty and the registry's host.
func FaultyRegistry(t testing.TB) (*Faulty, string) {
	t.Helper()
	fr := &Faulty{Next: registry.New(registry.Logger(log.New(io.Discard, "", 0)))}
	srv := httptest.NewServer(fr)
	t.Cleanup(srv.Close)
	return fr, strings.TrimPrefix(srv.URL, "http://")
}

// FaultyImage is a one-layer image pushed to a FaultyRegistry, for the
// resume tests: Faulty's Faults are empty; set them for the blob GETs.
type FaultyImage struct {
	Faulty *Faulty
	Ref    string   // HOST/kiln/faults:x
	Layer  v1.Layer // its one layer: Tar, uncompressed
	Tar    []byte   // a 300 kB file, data/blob
}

// PushFaultyImage starts a FaultyRegistry and pushes a FaultyImage to it.
func PushFaultyImage(t testing.TB) FaultyImage {
	t.Helper()
	fr, host := FaultyRegistry(t)
	tarb := Tar(t, []Entry{Sized("data/blob", 300_000)})
	layer := RawLayer(tarb, types.OCIUncompressedLayer)
	ref := host + "/kiln/faults:x"
	Push(t, ref, Image(t, Config{}, layer))
	return FaultyImage{Faulty: fr, Ref: ref, Layer: layer, Tar: tarb}
}

func (f *Faulty) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet || !strings.Contains(r.URL.Path, "/blobs/") {
		f.Next.ServeHTTP(w, r)
		return
	}
	f.mu.Lock()
	f.Ranges = append(f.Ranges, r.Header.Get("Range"))
	fault := ""
	if len(f.Faults) > 0 {
		fault, f.Faults = f.Faults[0], f.Faults[1:]
	}
	f.mu.Unlock()
	switch fault {
	case "429":
		w.Header().Set("Retry-After", "7")
		w.WriteHeader(http.StatusTooManyRequests)
		return
	case "503":
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	case "norange":
		r.Header.Del("Range")
	case "stall-head":
		<-r.Context().Done() // until the client gives up
		return
	}
	rec := httptest.NewRecorder()
	f.Next.ServeHTTP(rec, r)
	body := rec.Body.Bytes()
	for k, v := range rec.Header() {
		w.Header()[k] = v
	}
	if fault == "cut" || fault == "stall-body" {
		// Promise the whole body, send half, then drop the connection
		// (or go silent until the client gives up).
		w.WriteHeader(rec.Code)
		n, _ := w.Write(body[:len(body)/2])
		f.count(n)
		if fault == "stall-body" {
			w.(http.Flusher).Flush()
			<-r.Context().Done()
			return
		}
		hj, _ := w.(http.Hijacker)
		if c, _, err := hj.Hijack(); err == nil {
			c.Close()
		}
		return
	}
	w.WriteHeader(rec.Code)
	n, _ := w.Write(body)
	f.count(n)
}

func (f *Faulty) count(n int) {
	f.mu.Lock()
	f.Served += int64(n)
	f.mu.Unlock()
}
