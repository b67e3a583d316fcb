package main

import (
	"archive/zip"
	"bufio"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"time"
)

// newRand returns a deterministic random stream for a named purpose.
func newRand(purpose string) *rand.ChaCha8 {
	return rand.NewChaCha8(sha256.Sum256([]byte("kiln-fixtures/" + purpose)))
}

// tensorSpec is one entry of a safetensors header.
type tensorSpec struct {
	Dtype       string   `json:"dtype"`
	Shape       []int64  `json:"shape"`
	DataOffsets [2]int64 `json:"data_offsets"`
}

// WriteSafetensors writes a valid safetensors file of about mb MiB of F16
// tensor data laid out like a small decoder-only model. Returns the file size.
func WriteSafetensors(p string, mb int) (int64, error) {
	budget := int64(mb) << 20
	h := int64(2048)
	if mb < 64 {
		h = 256
	}
	header := map[string]any{"__metadata__": map[string]string{"format": "pt", "generator": "kiln-fixturegen"}}
	var off int64
	add := func(name string, shape ...int64) {
		n := int64(2)
		for _, d := range shape {
			n *= d
		}
		header[name] = tensorSpec{Dtype: "F16", Shape: shape, DataOffsets: [2]int64{off, off + n}}
		off += n
	}
	if budget >= 4*h*h*2+h*2 {
		add("model.embed_tokens.weight", 512, h)
	}
	for i := 0; ; i++ {
		per := 4*h*h*2 + h*2
		if off+per > budget {
			break
		}
		for _, proj := range []string{"q_proj", "k_proj", "v_proj", "o_proj"} {
			add(fmt.Sprintf("model.layers.%d.self_attn.%s.weight", i, proj), h, h)
		}
		add(fmt.Sprintf("model.layers.%d.input_layernorm.weight", i), h)
	}
	if rows := (budget - off) / (2 * h); rows > 0 {
		add("lm_head.weight", rows, h)
	}
	hj, err := json.Marshal(header)
	if err != nil {
		return 0, err
	}
	for len(hj)%8 != 0 { // the format allows trailing spaces; keep data 8-aligned
		hj = append(hj, ' ')
	}
	f, err := os.Create(p)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	w := bufio.NewWriterSize(f, 1<<20)
	var n8 [8]byte
	binary.LittleEndian.PutUint64(n8[:], uint64(len(hj)))
	w.Write(n8[:])
	w.Write(hj)
	// Finite, small-magnitude float16 values: random sign and mantissa,
	// exponent field 8..15 (2^-7 .. 1).
	r := newRand("weights")
	buf := make([]byte, 1<<20)
	for left := off; left > 0; {
		r.Read(buf)
		for i := 0; i+1 < len(buf); i += 2 {
			v := binary.LittleEndian.Uint16(buf[i:])
			v = v&0x83ff | (8+(v>>10)&7)<<10
			binary.LittleEndian.PutUint16(buf[i:], v)
		}
		n := min(left, int64(len(buf)))
		if _, err := w.Write(buf[:n]); err != nil {
			return 0, err
		}
		left -= n
	}
	if err := w.Flush(); err != nil {
		return 0, err
	}
	return 8 + int64(len(hj)) + off, f.Close()
}

// writeWheel writes a deterministic zip ("wheel") holding pseudo-random
// payload files so that it is about size bytes and does not compress.
func writeWheel(w io.Writer, name, version string, size int, epoch time.Time) error {
	zw := zip.NewWriter(w)
	r := newRand("wheel/" + name + "/" + version)
	pkg := name
	files := []struct {
		name string
		size int
	}{
		{pkg + "/__init__.py", 0},
		{pkg + "/_core.cpython-311-x86_64-linux-gnu.so", size * 7 / 10},
		{pkg + "/models/data.bin", size * 3 / 10},
		{fmt.Sprintf("%s-%s.dist-info/METADATA", pkg, version), 0},
		{fmt.Sprintf("%s-%s.dist-info/WHEEL", pkg, version), 0},
		{fmt.Sprintf("%s-%s.dist-info/RECORD", pkg, version), 0},
	}
	for _, f := range files {
		fh := &zip.FileHeader{Name: f.name, Method: zip.Store, Modified: epoch.UTC()}
		fw, err := zw.CreateHeader(fh)
		if err != nil {
			return err
		}
		switch {
		case f.size > 0:
			if _, err := io.CopyN(fw, r, int64(f.size)); err != nil {
				return err
			}
		case filepath.Base(f.name) == "METADATA":
			fmt.Fprintf(fw, "Metadata-Version: 2.1\nName: %s\nVersion: %s\nSummary: kiln test fixture\n", name, version)
		case filepath.Base(f.name) == "WHEEL":
			fmt.Fprintf(fw, "Wheel-Version: 1.0\nGenerator: bdist_wheel (0.42.0)\nRoot-Is-Purelib: false\nTag: cp311-cp311-manylinux_2_17_x86_64\n")
		case filepath.Base(f.name) == "__init__.py":
			fmt.Fprintf(fw, "__version__ = %q\n", version)
		}
	}
	return zw.Close()
}

func sha224hex(s string) string {
	h := sha256.Sum224([]byte(s))
	return hex.EncodeToString(h[:])
}

// pipCacheWheels are the downloads "cached" by the naive pip install.
var pipCacheWheels = []struct {
	name, version, tag string
	size               int
}{
	{"transformers", "4.38.2", "py3-none-any", 3 << 20},
	{"tokenizers", "0.15.2", "cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64", 2 << 20},
	{"safetensors", "0.4.2", "cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64", 1200 << 10},
	{"regex", "2023.12.25", "cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64", 760 << 10},
	{"huggingface_hub", "0.21.4", "py3-none-any", 340 << 10},
	{"tqdm", "4.66.2", "py3-none-any", 78 << 10},
	{"requests", "2.31.0", "py3-none-any", 62 << 10},
}

// GenPipCache writes a pip cache (pip >= 23.3 layout: http-v2 entries with
// a .body file, built wheels under wheels/, selfcheck/) into dir.
func GenPipCache(dir string, epoch time.Time) error {
	var files []string
	write := func(rel string, fn func(w io.Writer) error) error {
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		f, err := os.Create(p)
		if err != nil {
			return err
		}
		bw := bufio.NewWriter(f)
		if err := fn(bw); err != nil {
			f.Close()
			return err
		}
		if err := bw.Flush(); err != nil {
			f.Close()
			return err
		}
		files = append(files, p)
		return f.Close()
	}
	for _, wh := range pipCacheWheels {
		fname := fmt.Sprintf("%s-%s-%s.whl", wh.name, wh.version, wh.tag)
		url := fmt.Sprintf("https://files.pythonhosted.org/packages/%s/%s", sha224hex(fname)[:2], fname)
		key := sha224hex(url)
		rel := filepath.Join("http-v2", key[0:1], key[1:2], key[2:3], key[3:4], key[4:5], key[5:])
		if err := write(rel+".body", func(w io.Writer) error { return writeWheel(w, wh.name, wh.version, wh.size, epoch) }); err != nil {
			return err
		}
		if err := write(rel, func(w io.Writer) error {
			// cachecontrol's serialized response metadata (msgpack in real
			// pip; a readable stand-in here).
			_, err := fmt.Fprintf(w, "cc=4,\x85\xa8response\x86\xa6status\xcd\x00\xc8\xa7headers{\"Content-Type\":\"binary/octet-stream\",\"Content-Length\":\"%d\",\"ETag\":\"%s\"}\xa3url%s",
				wh.size, key[:32], url)
			return err
		}); err != nil {
			return err
		}
	}
	// A wheel pip built locally from an sdist.
	link := "https://files.pythonhosted.org/packages/source/a/antlr4-python3-runtime/antlr4-python3-runtime-4.9.3.tar.gz"
	k := sha224hex(link)
	if err := write(filepath.Join("wheels", k[0:2], k[2:4], k[4:6], k[6:], "antlr4_python3_runtime-4.9.3-py3-none-any.whl"),
		func(w io.Writer) error { return writeWheel(w, "antlr4", "4.9.3", 140<<10, epoch) }); err != nil {
		return err
	}
	if err := write(filepath.Join("wheels", k[0:2], k[2:4], k[4:6], k[6:], "origin.json"), func(w io.Writer) error {
		_, err := fmt.Fprintf(w, "{\"archive_info\": {\"hash\": \"sha256=%s\"}, \"url\": %q}", sha224hex("antlr")[:56], link)
		return err
	}); err != nil {
		return err
	}
	if err := write(filepath.Join("selfcheck", sha224hex("/usr")+".json"), func(w io.Writer) error {
		_, err := fmt.Fprintf(w, "{\"key\":\"/usr\",\"last_check\":\"%s\",\"pypi_version\":\"25.1.1\"}", epoch.UTC().Format(time.RFC3339))
		return err
	}); err != nil {
		return err
	}
	return chtimesAll(dir, epoch)
}

var appFiles = map[string]string{
	"requirements.txt": "torch==2.6.0\ntransformers==4.48.3\ntokenizers==0.15.2\nsafetensors==0.4.2\n",
	"serve.py": `"""Tiny inference server used as a kiln test fixture."""
import json
import sys

from kiln_app.model import load_model


def main(argv):
    model = load_model("/app/models/model.safetensors")
    print(json.dumps({"tensors": len(model), "argv": argv[1:]}))


if __name__ == "__main__":
    main(sys.argv)
`,
	"kiln_app/__init__.py": "\"\"\"kiln fixture application package.\"\"\"\n__version__ = \"0.1.0\"\n",
	"kiln_app/model.py": `import json
import struct


def load_model(path):
    """Read the safetensors header (the tensors themselves stay on disk)."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
    header.pop("__metadata__", None)
    return header
`,
	"models/config.json": "{\"architectures\": [\"KilnForCausalLM\"], \"hidden_size\": 2048, \"torch_dtype\": \"float16\"}\n",
}

// GenAppSrc writes the /app tree (source + weights) into dir.
func GenAppSrc(dir string, weightsMB int, epoch time.Time) error {
	names := make([]string, 0, len(appFiles))
	for n := range appFiles {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		p := filepath.Join(dir, n)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, []byte(appFiles[n]), 0o644); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(filepath.Join(dir, "models"), 0o755); err != nil {
		return err
	}
	if _, err := WriteSafetensors(filepath.Join(dir, "models", "model.safetensors"), weightsMB); err != nil {
		return err
	}
	return chtimesAll(dir, epoch)
}

// chtimesAll stamps every file and directory under dir with t, so that
// byte-compiled .pyc files (which embed the source mtime) are reproducible.
func chtimesAll(dir string, t time.Time) error {
	var paths []string
	err := filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		paths = append(paths, p)
		return nil
	})
	if err != nil {
		return err
	}
	for i := len(paths) - 1; i >= 0; i-- {
		if err := os.Chtimes(paths[i], t, t); err != nil {
			return err
		}
	}
	return nil
}
