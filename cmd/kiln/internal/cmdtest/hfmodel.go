package cmdtest

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"testing"

	"github.com/kiln-build/kiln/internal/testkit"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/kiln-build/kiln/internal/testimage"
	"github.com/kiln-build/kiln/layers"
)

// HFModelMount is where HFModelImage keeps its model directory.
const HFModelMount = "/app/models"

// HFModelImage is an app image whose model directory is shaped as a
// Hugging Face snapshot: two safetensors shards (one of 20 MiB, so it gets
// its own raw layer), the shard index, config, tokenizer, generation
// config, a README and a file in a subdirectory, beside /app/serve.py
// outside it. files maps every regular file's absolute path to its
// sha256 (hex).
func HFModelImage(t *testing.T) (img v1.Image, files map[string]string) {
	t.Helper()
	model := []testimage.Entry{
		testimage.Safetensors("app/models/model-00001-of-00002.safetensors", 20<<20),
		testimage.Safetensors("app/models/model-00002-of-00002.safetensors", 6000),
		testimage.File("app/models/model.safetensors.index.json", []byte(`{"metadata":{"total_size":20977000},"weight_map":{"w":"model-00001-of-00002.safetensors"}}`+"\n")),
		testimage.File("app/models/config.json", []byte(`{"architectures":["LlamaForCausalLM"],"hidden_size":64}`+"\n")),
		testimage.File("app/models/tokenizer.json", []byte(`{"version":"1.0","model":{"type":"BPE","vocab":{"a":0}}}`+"\n")),
		testimage.File("app/models/generation_config.json", []byte(`{"do_sample":true,"temperature":0.6}`+"\n")),
		testimage.File("app/models/README.md", []byte("# a tiny model\n")),
		testimage.File("app/models/tokenizer/special_tokens_map.json", []byte(`{"bos_token":"<s>"}`+"\n")),
	}
	app := []testimage.Entry{testimage.File("app/serve.py", []byte("print('serve')\n"))}
	img = testimage.Image(t, testimage.Config{Env: []string{"PATH=/usr/bin"}},
		testimage.Layer(t, []testimage.Entry{testimage.Sized("usr/bin/python3", 3000)}, "gzip"),
		testimage.Layer(t, model, "gzip"),
		testimage.Layer(t, app, "gzip"))
	return img, ImageFiles(t, img)
}

// ImageFiles lists the regular files of an image whose layers hold no
// whiteouts (a test image, a slim rewrite): absolute path → sha256 hex.
func ImageFiles(t *testing.T, img v1.Image) map[string]string {
	t.Helper()
	ls, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, l := range ls {
		rc, err := l.Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		err = layers.WalkTar(context.Background(), rc, func(e *layers.Entry, body io.Reader) error {
			if e.Whiteout || e.Opaque {
				t.Fatalf("ImageFiles: %s: whiteouts are not handled", e.Path)
			}
			if e.Header.Typeflag != tar.TypeReg {
				return nil
			}
			h := sha256.New()
			if _, err := io.Copy(h, body); err != nil {
				return err
			}
			out["/"+e.Path] = hex.EncodeToString(h.Sum(nil))
			return nil
		})
		rc.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// RefFiles is ImageFiles for an image by reference (layers.Open's forms).
func RefFiles(t *testing.T, ref string) map[string]string {
	t.Helper()
	img, err := testkit.OpenImage(context.Background(), ref)
	if err != nil {
		t.Fatal(err)
	}
	defer img.Close()
	vi, err := img.V1(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return ImageFiles(t, vi)
}
