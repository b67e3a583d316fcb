// Command fixturegen assembles kiln's CUDA test images from layer
// directories built by scripts/fixtures.sh, and generates the synthetic
// parts of the app image (pip cache, /app with safetensors weights).
//
//	fixturegen pipcache -out DIR [-epoch N]
//	fixturegen appsrc   -out DIR [-weights-mb N] [-epoch N]
//	fixturegen weights  -out FILE [-mb N]
//	fixturegen build    -layers DIR -out DIR [-blob-cache DIR] [-epoch N] [-registry HOST:PORT]
//
// See testdata/fixtures/README.md.
package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

func main() {
	log.SetFlags(0)
	log.SetPrefix("fixturegen: ")
	if len(os.Args) < 2 {
		usage()
	}
	var err error
	switch os.Args[1] {
	case "pipcache":
		fs := flag.NewFlagSet("pipcache", flag.ExitOnError)
		out := fs.String("out", "", "pip cache directory to create")
		epoch := fs.Int64("epoch", defaultEpoch(), "mtime for generated files")
		fs.Parse(os.Args[2:])
		need(*out, "-out")
		err = GenPipCache(*out, time.Unix(*epoch, 0))
	case "appsrc":
		fs := flag.NewFlagSet("appsrc", flag.ExitOnError)
		out := fs.String("out", "", "app directory to create")
		mb := fs.Int("weights-mb", envInt("KILN_FIXTURE_WEIGHTS_MB", 300), "size of models/model.safetensors in MiB")
		epoch := fs.Int64("epoch", defaultEpoch(), "mtime for generated files")
		fs.Parse(os.Args[2:])
		need(*out, "-out")
		err = GenAppSrc(*out, *mb, time.Unix(*epoch, 0))
	case "weights":
		fs := flag.NewFlagSet("weights", flag.ExitOnError)
		out := fs.String("out", "", "safetensors file to write")
		mb := fs.Int("mb", envInt("KILN_FIXTURE_WEIGHTS_MB", 300), "tensor data size in MiB")
		fs.Parse(os.Args[2:])
		need(*out, "-out")
		_, err = WriteSafetensors(*out, *mb)
	case "wheels":
		fs := flag.NewFlagSet("wheels", flag.ExitOnError)
		root := fs.String("root", "", "rootfs with python3-torch-cuda installed (read only)")
		out := fs.String("out", "", "directory for the wheels and SHA256SUMS")
		epoch := fs.Int64("epoch", defaultEpoch(), "mtime of every wheel entry")
		fs.Parse(os.Args[2:])
		need(*root, "-root")
		need(*out, "-out")
		err = GenWheels(*root, *out, time.Unix(*epoch, 0))
	case "build":
		fs := flag.NewFlagSet("build", flag.ExitOnError)
		var o buildOpts
		fs.StringVar(&o.layers, "layers", "", "directory holding <layer>/{rootfs,id,created_by}")
		fs.StringVar(&o.out, "out", envStr("KILN_FIXTURES", "fixtures"), "output directory")
		fs.StringVar(&o.blobCache, "blob-cache", "", "compressed blob cache (default <layers>/../blobs)")
		fs.Int64Var(&o.epoch, "epoch", defaultEpoch(), "SOURCE_DATE_EPOCH for tar entries and configs")
		fs.StringVar(&o.registry, "registry", "", "push to this registry host:port (empty: do not push)")
		fs.IntVar(&o.jobs, "jobs", runtime.NumCPU(), "layers compressed in parallel")
		fs.BoolVar(&o.archives, "archives", true, "write the docker-archive outputs (false: remove them)")
		fs.Parse(os.Args[2:])
		need(o.layers, "-layers")
		if o.blobCache == "" {
			o.blobCache = filepath.Join(o.layers, "..", "blobs")
		}
		err = build(o)
	default:
		usage()
	}
	if errors.Is(err, errPruned) {
		// scripts/fixtures.sh rebuilds the pruned layers on this code.
		log.Print(err)
		os.Exit(3)
	}
	if err != nil {
		log.Fatal(err)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: fixturegen pipcache|appsrc|weights|wheels|build [flags]  (-h for flags)")
	os.Exit(2)
}

func need(v, flagName string) {
	if v == "" {
		log.Fatalf("%s is required", flagName)
	}
}

func envStr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func envInt(k string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(k)); err == nil {
		return v
	}
	return def
}

func defaultEpoch() int64 {
	if v, err := strconv.ParseInt(os.Getenv("SOURCE_DATE_EPOCH"), 10, 64); err == nil {
		return v
	}
	return 0
}

type buildOpts struct {
	layers, out, blobCache, registry string
	epoch                            int64
	jobs                             int
	// archives writes the docker-archive outputs (app.tar: 8.2 GB of
	// uncompressed layers, the one output that cannot share the blob
	// cache's files); without it they are removed. scripts/fixtures.sh
	// writes them on demand (its archive command) for the tests and
	// benchmarks that read docker save output.
	archives bool
}

type builtImage struct {
	def     imageDef
	img     v1.Image
	layers  []*blobLayer
	digest  v1.Hash
	cfgHash v1.Hash
}

func build(o buildOpts) error {
	epoch := time.Unix(o.epoch, 0).UTC()
	start := time.Now()

	// Layer metadata written by scripts/fixtures.sh.
	ids := map[string]string{}
	createdBy := map[string]string{}
	// Debian 12's base chain (scripts/fixtures.sh bookworm), when built:
	// only the debian12 stand-in uses it.
	chains := [][]string{layerOrder}
	if _, err := os.Stat(filepath.Join(o.layers, bookwormOrder[len(bookwormOrder)-1], "id")); err == nil {
		chains = append(chains, bookwormOrder)
	}
	for _, n := range slices.Concat(chains...) {
		d := filepath.Join(o.layers, n)
		id, err := os.ReadFile(filepath.Join(d, "id"))
		if err != nil {
			return fmt.Errorf("layer %s not built (run scripts/fixtures.sh): %w", n, err)
		}
		cb, err := os.ReadFile(filepath.Join(d, "created_by"))
		if err != nil {
			return err
		}
		ids[n] = strings.TrimSpace(string(id))
		createdBy[n] = strings.TrimSpace(string(cb))
	}

	// Compress every (layer, compression) pair once, in parallel.
	type job struct {
		layer string
		comp  Compression
	}
	var jobList []job
	seen := map[job]bool{}
	for _, d := range imageDefs {
		for _, l := range d.layerNames() {
			j := job{l, d.compression}
			if !seen[j] {
				seen[j] = true
				jobList = append(jobList, j)
			}
		}
	}
	for _, l := range slices.Concat(chains[1:]...) {
		jobList = append(jobList, job{l, Gzip})
	}
	metas := map[job]*BlobMeta{}
	metaFiles := map[string]bool{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, max(1, o.jobs))
	errs := make([]error, len(jobList))
	for i, j := range jobList {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			t0 := time.Now()
			// The key covers the layer and every layer below it (opaque
			// markers depend on the lowers).
			key := strconv.FormatInt(o.epoch, 10) + "-" + blobFormat
			lowers := []string{}
			chain := layerOrder
			for _, c := range chains {
				if slices.Contains(c, j.layer) {
					chain = c
				}
			}
			for _, n := range chain {
				key += "-" + ids[n]
				if n == j.layer {
					break
				}
				lowers = append(lowers, filepath.Join(o.layers, n, "rootfs"))
			}
			sk := sha256.Sum256([]byte(key))
			key = j.layer + "-" + hex.EncodeToString(sk[:16])
			mu.Lock()
			metaFiles[key+"-"+string(j.comp)+".json"] = true
			mu.Unlock()
			m, err := buildBlob(filepath.Join(o.layers, j.layer, "rootfs"), lowers, key, j.comp, o.blobCache, epoch)
			if err != nil {
				errs[i] = fmt.Errorf("layer %s (%s): %w", j.layer, j.comp, err)
				return
			}
			log.Printf("layer %-8s %-4s %s %6.0f MiB -> %6.0f MiB (%.1fs)", j.layer, j.comp, m.Digest[:19],
				float64(m.UncompressedSize)/(1<<20), float64(m.Size)/(1<<20), time.Since(t0).Seconds())
			mu.Lock()
			metas[j] = m
			mu.Unlock()
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}

	if err := pruneBlobCache(o.blobCache, metaFiles, metas); err != nil {
		return err
	}

	// Assemble the images.
	var imgs []*builtImage
	for _, d := range imageDefs {
		b := &builtImage{def: d}
		var vl []v1.Layer
		for _, l := range d.layerNames() {
			bl, err := newBlobLayer(o.blobCache, metas[job{l, d.compression}])
			if err != nil {
				return err
			}
			b.layers = append(b.layers, bl)
			vl = append(vl, bl)
		}
		img, err := assemble(d, vl, createdBy, epoch)
		if err != nil {
			return err
		}
		b.img = img
		if b.digest, err = img.Digest(); err != nil {
			return err
		}
		if b.cfgHash, err = img.ConfigName(); err != nil {
			return err
		}
		imgs = append(imgs, b)
	}

	// Skip rewriting outputs that already match (warm runs).
	sum := sha256.New()
	for _, b := range imgs {
		fmt.Fprintf(sum, "%s %s %s %s\n", b.def.name, b.digest, b.def.archive, b.def.archiveTag)
	}
	stamp := hex.EncodeToString(sum.Sum(nil))
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return err
	}
	stampPath := filepath.Join(o.out, ".stamp")
	if old, _ := os.ReadFile(stampPath); string(old) == stamp && outputsExist(o.out, imgs) {
		log.Printf("outputs in %s are up to date", o.out)
	} else {
		os.Remove(stampPath)
		for _, b := range imgs {
			if b.def.archive != "" {
				os.Remove(filepath.Join(o.out, b.def.archive))
			}
		}
		if err := writeOutputs(o, imgs, epoch); err != nil {
			return err
		}
		if err := os.WriteFile(stampPath, []byte(stamp), 0o644); err != nil {
			return err
		}
	}
	// The archives are of the stamp's images: written when asked and
	// missing, removed when not asked.
	for _, b := range imgs {
		if b.def.archive == "" {
			continue
		}
		dst := filepath.Join(o.out, b.def.archive)
		_, err := os.Stat(dst)
		switch {
		case !o.archives && err == nil:
			if err := os.Remove(dst); err != nil {
				return err
			}
			log.Printf("removed %s (written on demand: scripts/fixtures.sh archive)", dst)
		case o.archives && err != nil:
			if err := writeArchive(o, b, epoch); err != nil {
				return err
			}
		}
	}

	if o.registry != "" {
		// NVIDIA's images the catalog names, stood in for (standins.go).
		base := map[string]v1.Layer{}
		for _, n := range slices.Concat([]string{"base", "cudart", "runtime", "devel"}, slices.Concat(chains[1:]...)) {
			bl, err := newBlobLayer(o.blobCache, metas[job{n, Gzip}])
			if err != nil {
				return err
			}
			base[n] = bl
		}
		standIns, err := buildStandIns(base, createdBy, epoch)
		if err != nil {
			return fmt.Errorf("stand-in bases: %w", err)
		}
		refs := make([]string, 0, len(standIns))
		for r := range standIns {
			refs = append(refs, r)
		}
		sort.Strings(refs)
		for _, r := range refs {
			ref, err := name.ParseReference(o.registry+"/"+r, name.Insecure)
			if err != nil {
				return err
			}
			if err := remote.Write(ref, standIns[r], remote.WithJobs(4)); err != nil {
				return fmt.Errorf("push %s: %w", ref, err)
			}
			dg, _ := standIns[r].Digest()
			log.Printf("pushed %s@%s (stand-in)", ref, dg)
		}
		for _, b := range imgs {
			ref, err := name.ParseReference(o.registry+"/"+b.def.registryRef, name.Insecure)
			if err != nil {
				return err
			}
			t0 := time.Now()
			if err := remote.Write(ref, b.img, remote.WithJobs(4)); err != nil {
				return fmt.Errorf("push %s: %w", ref, err)
			}
			log.Printf("pushed %s@%s (%.1fs)", ref, b.digest, time.Since(t0).Seconds())
		}
	}
	log.Printf("done in %.1fs", time.Since(start).Seconds())
	return nil
}

// pruneBlobCache drops cached blobs of layers that were rebuilt since.
func pruneBlobCache[K comparable](dir string, metaFiles map[string]bool, metas map[K]*BlobMeta) error {
	keep := map[string]bool{}
	for _, m := range metas {
		keep[strings.TrimPrefix(m.Digest, "sha256:")] = true
	}
	ents, err := os.ReadDir(filepath.Join(dir, "meta"))
	if err != nil {
		return err
	}
	for _, e := range ents {
		if !metaFiles[e.Name()] {
			os.Remove(filepath.Join(dir, "meta", e.Name()))
		}
	}
	ents, err = os.ReadDir(filepath.Join(dir, "sha256"))
	if err != nil {
		return err
	}
	for _, e := range ents {
		if !keep[e.Name()] {
			log.Printf("pruning stale cached blob %s", e.Name())
			os.Remove(filepath.Join(dir, "sha256", e.Name()))
		}
	}
	return nil
}

func outputsExist(out string, imgs []*builtImage) bool {
	files := []string{"oci/index.json", "oci/oci-layout", "expected.json"}
	for _, f := range files {
		if _, err := os.Stat(filepath.Join(out, f)); err != nil {
			return false
		}
	}
	return true
}

func writeOutputs(o buildOpts, imgs []*builtImage, epoch time.Time) error {
	// 1. OCI layout with all images, blobs hard-linked from the cache.
	ociTmp := filepath.Join(o.out, "oci.tmp")
	if err := os.RemoveAll(ociTmp); err != nil {
		return err
	}
	lp, err := layout.Write(ociTmp, empty.Index)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(ociTmp, "blobs", "sha256"), 0o755); err != nil {
		return err
	}
	for _, b := range imgs {
		for _, l := range b.layers {
			dst := filepath.Join(ociTmp, "blobs", "sha256", l.digest.Hex)
			if _, err := os.Stat(dst); err == nil {
				continue
			}
			if err := linkOrCopy(l.path, dst); err != nil {
				return err
			}
		}
		if err := lp.AppendImage(b.img, layout.WithAnnotations(map[string]string{
			"org.opencontainers.image.ref.name": b.def.name,
		})); err != nil {
			return err
		}
	}
	ociDir := filepath.Join(o.out, "oci")
	if err := os.RemoveAll(ociDir); err != nil {
		return err
	}
	if err := os.Rename(ociTmp, ociDir); err != nil {
		return err
	}
	log.Printf("wrote %s", ociDir)

	createdBy := layerCreatedBy(o.layers)

	// 3. expected.json
	exp := &Expected{SourceDateEpoch: o.epoch, CountingRule: countingRule, Images: map[string]*ExpectedImage{}}
	for _, b := range imgs {
		ei := &ExpectedImage{
			OCIRef:         "oci:" + filepath.ToSlash(filepath.Join(filepath.Base(o.out), "oci")) + ":" + b.def.name,
			RegistryRef:    b.def.registryRef,
			Archive:        b.def.archive,
			ArchiveTag:     b.def.archiveTag,
			ManifestDigest: b.digest.String(),
			ConfigDigest:   b.cfgHash.String(),
			LayerMediaType: string(b.def.compression.mediaType()),
			LayerCount:     len(b.layers),
		}
		var stats []*LayerStats
		for i, l := range b.layers {
			n := b.def.layerNames()[i]
			s := l.meta.Stats
			stats = append(stats, s)
			ei.Layers = append(ei.Layers, ExpectedLayer{
				Index: i, Name: n, Digest: l.meta.Digest, DiffID: l.meta.DiffID, Size: l.meta.Size,
				UncompressedSize: l.meta.UncompressedSize, RegularFiles: s.RegularFiles, RegularBytes: s.RegularBytes,
				Whiteouts: len(s.Whiteouts), OpaqueDirs: len(s.OpaqueDirs), CreatedBy: createdBy[n],
			})
		}
		exp.Images[b.def.name] = ei
		if b.def.name == "app" {
			devel := filepath.Join(o.layers, "devel")
			if _, err := os.Stat(filepath.Join(devel, "pruned")); err == nil {
				// The truth is counted from the devel layer's files.
				return errPruned
			}
			t, err := appTruth(b.def.layerNames(), stats, filepath.Join(o.layers, "devel", "rootfs"))
			if err != nil {
				return err
			}
			exp.App = t
		}
	}
	bs, err := json.MarshalIndent(exp, "", "  ")
	if err != nil {
		return err
	}
	dst := filepath.Join(o.out, "expected.json")
	if err := os.WriteFile(dst+".tmp", append(bs, '\n'), 0o644); err != nil {
		return err
	}
	return os.Rename(dst+".tmp", dst)
}

// layerCreatedBy reads each layer's history line.
func layerCreatedBy(layers string) map[string]string {
	m := map[string]string{}
	for _, n := range layerOrder {
		cb, _ := os.ReadFile(filepath.Join(layers, n, "created_by"))
		m[n] = strings.TrimSpace(string(cb))
	}
	return m
}

// writeArchive writes b's docker-archive (docker save's shape:
// uncompressed layers) from the blob cache.
func writeArchive(o buildOpts, b *builtImage, epoch time.Time) error {
	createdBy := layerCreatedBy(o.layers)
	var ul []v1.Layer
	for _, l := range b.layers {
		ul = append(ul, uncompressedLayer{l})
	}
	img, err := assemble(b.def, ul, createdBy, epoch)
	if err != nil {
		return err
	}
	if c, _ := img.ConfigName(); c != b.cfgHash {
		return fmt.Errorf("%s: docker-archive config %s differs from OCI config %s", b.def.name, c, b.cfgHash)
	}
	tag, err := name.NewTag(b.def.archiveTag)
	if err != nil {
		return err
	}
	dst := filepath.Join(o.out, b.def.archive)
	t0 := time.Now()
	if err := tarball.WriteToFile(dst+".tmp", tag, img); err != nil {
		os.Remove(dst + ".tmp")
		return err
	}
	if err := os.Rename(dst+".tmp", dst); err != nil {
		return err
	}
	log.Printf("wrote %s (%.1fs)", dst, time.Since(t0).Seconds())
	return nil
}

func linkOrCopy(src, dst string) error {
	if err := os.Link(src, dst); err == nil {
		return nil
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(dst + ".tmp")
	if err != nil {
		return err
	}
	if _, err := out.ReadFrom(in); err != nil {
		out.Close()
		return err
	}
	if err := out.Close(); err != nil {
		return err
	}
	return os.Rename(dst+".tmp", dst)
}
