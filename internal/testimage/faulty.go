package testimage

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
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
