// Command countproxy is a reverse proxy in front of a plain-HTTP registry
// that counts the blob bytes its clients read: bench/coldstart.sh points
// the stargz snapshotter at it to report the bytes a lazy pull moved by
// the time the probe succeeded, and after its background fetch.
//
//	countproxy -listen 127.0.0.1:5055 -registry 127.0.0.1:5000
//
// GET /_count answers the bytes read so far (a decimal number); every
// other request goes to the registry.
package main

import (
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:5055", "address to serve on")
	registry := flag.String("registry", "127.0.0.1:5000", "plain-HTTP registry to forward to")
	flag.Parse()
	u, err := url.Parse("http://" + *registry)
	if err != nil {
		log.Fatal(err)
	}
	var n atomic.Int64
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.ModifyResponse = func(resp *http.Response) error {
		if strings.Contains(resp.Request.URL.Path, "/blobs/") {
			resp.Body = &counted{ReadCloser: resp.Body, n: &n}
		}
		return nil
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/_count", func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, n.Load()) })
	mux.Handle("/", rp)
	log.Fatal(http.ListenAndServe(*listen, mux))
}

type counted struct {
	io.ReadCloser
	n *atomic.Int64
}

func (c *counted) Read(p []byte) (int, error) {
	k, err := c.ReadCloser.Read(p)
	c.n.Add(int64(k))
	return k, err
}
