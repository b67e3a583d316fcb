package recipes

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/parser"
	"github.com/goccy/go-yaml/token"

	"github.com/kiln-build/kiln/cuda"
	"github.com/kiln-build/kiln/internal/localfile"
	"github.com/kiln-build/kiln/internal/suggest"
	"github.com/kiln-build/kiln/recipes/wheelkey"
)

// Recipe is a kiln.yaml: one pinned GPU stack. Empty fields are filled by
// Resolve with the newest compatible choice.
type Recipe struct {
	Name        string `yaml:"name" json:"name"`
	Description string `yaml:"description,omitempty" json:"description,omitempty"`
	CUDA        string `yaml:"cuda,omitempty" json:"cuda,omitempty"`   // 12.4 or 12.4.1
	CuDNN       string `yaml:"cudnn,omitempty" json:"cudnn,omitempty"` // auto (default), none, 8, 9
	// RuntimeBase picks the runtime stage's nvidia/cuda flavour: auto
	// (default: -base when the torch wheels bring their own CUDA libraries,
	// else -runtime), base or runtime.
	RuntimeBase  string     `yaml:"runtime_base,omitempty" json:"runtime_base,omitempty"`
	OS           string     `yaml:"os,omitempty" json:"os,omitempty"` // ubuntu22.04, ubuntu24.04, ...
	Python       string     `yaml:"python,omitempty" json:"python,omitempty"`
	Torch        *TorchSpec `yaml:"torch,omitempty" json:"torch,omitempty"`
	FlashAttn    *FASpec    `yaml:"flash_attn,omitempty" json:"flash_attn,omitempty"`
	BitsAndBytes *BNBSpec   `yaml:"bitsandbytes,omitempty" json:"bitsandbytes,omitempty"`
	Pip          []string   `yaml:"pip,omitempty" json:"pip,omitempty"`
	// PipFromSource names pip requirements kiln compiles from their
	// source archive (a project that publishes no wheel for the image's
	// Python or platform), in the devel stage; with a wheel cache the
	// compiled wheel is kept in the registry and fetched, not compiled,
	// by the next build.
	PipFromSource []string `yaml:"pip_from_source,omitempty" json:"pip_from_source,omitempty"`
	Apt           []string `yaml:"apt,omitempty" json:"apt,omitempty"`
	GPUs          []string `yaml:"gpus,omitempty" json:"gpus,omitempty"`
	// GPUCode says what kiln build does with the GPU code of the libraries
	// it installs (default: pruned to gpus when gpus are set).
	GPUCode        *GPUCodeSpec `yaml:"gpu_code,omitempty" json:"gpu_code,omitempty"`
	Platforms      []string     `yaml:"platforms,omitempty" json:"platforms,omitempty"`
	App            *AppSpec     `yaml:"app,omitempty" json:"app,omitempty"`
	Weights        []Weight     `yaml:"weights,omitempty" json:"weights,omitempty"`
	RegistryMirror string       `yaml:"registry_mirror,omitempty" json:"registry_mirror,omitempty"`
	WheelIndexes   []string     `yaml:"wheel_indexes,omitempty" json:"wheel_indexes,omitempty"`
	// PythonMirror replaces the URL prefix of the relocatable Python kiln
	// downloads when the base OS's python3 is not the recipe's version
	// (https://github.com/astral-sh/python-build-standalone/releases/download).
	PythonMirror string     `yaml:"python_mirror,omitempty" json:"python_mirror,omitempty"`
	Build        *BuildSpec `yaml:"build,omitempty" json:"build,omitempty"`
	// WheelCache keeps the wheels kiln compiles in a registry. Where
	// they are cached changes no image, so it is not in the recipe's
	// hash (json "-"): moving the cache leaves the lock fresh.
	WheelCache *WheelCacheSpec `yaml:"wheel_cache,omitempty" json:"-"`
	Test       []string        `yaml:"test,omitempty" json:"test,omitempty"`
	path       string
}

// TorchSpec pins PyTorch and its companions.
type TorchSpec struct {
	Version     string `yaml:"version,omitempty" json:"version,omitempty"`         // 2.5 or 2.5.1
	Variant     string `yaml:"variant,omitempty" json:"variant,omitempty"`         // cu124 ...
	Torchvision string `yaml:"torchvision,omitempty" json:"torchvision,omitempty"` // true, false or a version
	Torchaudio  string `yaml:"torchaudio,omitempty" json:"torchaudio,omitempty"`   // true, false or a version
	IndexURL    string `yaml:"index_url,omitempty" json:"index_url,omitempty"`     // default https://download.pytorch.org/whl/<variant>
}

// FASpec asks for FlashAttention 2.
type FASpec struct {
	Version string `yaml:"version,omitempty" json:"version,omitempty"`
	Build   string `yaml:"build,omitempty" json:"build,omitempty"` // auto (default), wheel, source
}

// GPUCodeSpec tunes fat-binary pruning in kiln build: the framework's and
// extensions' libraries keep, per GPU in gpus, the cubin that runs on it
// natively and (keep_ptx) each fat binary's newest PTX.
type GPUCodeSpec struct {
	Prune   *bool `yaml:"prune,omitempty" json:"prune,omitempty"`       // default true when gpus are set
	KeepPTX *bool `yaml:"keep_ptx,omitempty" json:"keep_ptx,omitempty"` // default true
	// NVIDIALibs prunes NVIDIA's redistributable libraries (the nvidia-*
	// wheels) too: whether their license allows modified copies is the
	// user's call.
	NVIDIALibs bool `yaml:"nvidia_libs,omitempty" json:"nvidia_libs,omitempty"`
}

// BNBSpec asks for bitsandbytes.
type BNBSpec struct {
	Version string `yaml:"version,omitempty" json:"version,omitempty"`
}

// AppSpec is the application layer.
type AppSpec struct {
	Files      []FileCopy        `yaml:"files,omitempty" json:"files,omitempty"`
	Workdir    string            `yaml:"workdir,omitempty" json:"workdir,omitempty"`
	Env        map[string]string `yaml:"env,omitempty" json:"env,omitempty"`
	Entrypoint []string          `yaml:"entrypoint,omitempty" json:"entrypoint,omitempty"`
	Cmd        []string          `yaml:"cmd,omitempty" json:"cmd,omitempty"`
	User       string            `yaml:"user,omitempty" json:"user,omitempty"`
	Ports      []int             `yaml:"ports,omitempty" json:"ports,omitempty"`
}

// FileCopy copies Src (relative to the recipe) to Dst in the image.
type FileCopy struct {
	Src string `yaml:"src" json:"src"`
	Dst string `yaml:"dst" json:"dst"`
}

// Weight is model data kept out of the image and mounted at run time.
type Weight struct {
	Name     string `yaml:"name,omitempty" json:"name,omitempty"`
	Source   string `yaml:"source" json:"source"` // hf://org/model, s3://..., https://..., /local/path
	Revision string `yaml:"revision,omitempty" json:"revision,omitempty"`
	Mount    string `yaml:"mount" json:"mount"`
	SHA256   string `yaml:"sha256,omitempty" json:"sha256,omitempty"`
}

// BuildSpec sizes source builds (FlashAttention's MAX_JOBS).
type BuildSpec struct {
	MemoryGB int `yaml:"memory_gb,omitempty" json:"memory_gb,omitempty"`
	CPUs     int `yaml:"cpus,omitempty" json:"cpus,omitempty"`
}

// WheelCacheSpec is wheel_cache: the registry repository that keeps the
// wheels kiln compiles from source (kiln build --wheel-cache overrides
// repo).
type WheelCacheSpec struct {
	Repo string `yaml:"repo,omitempty" json:"repo,omitempty"`
	// Mirror is a host[:port] serving the same repository, read first.
	Mirror string `yaml:"mirror,omitempty" json:"mirror,omitempty"`
	// AllowWiderArchs lets a build use a cached wheel compiled for more
	// GPU architectures than the recipe's (correct, but larger).
	AllowWiderArchs bool `yaml:"allow_wider_archs,omitempty" json:"allow_wider_archs,omitempty"`
}

// Path is the file the recipe was loaded from ("" when parsed from bytes).
func (r *Recipe) Path() string { return r.path }

// Dir is the directory app files are relative to.
func (r *Recipe) Dir() string {
	if r.path == "" {
		return "."
	}
	return filepath.Dir(r.path)
}

// Hash is the sha256 of the recipe's canonical JSON: comments, key order
// and formatting do not change it.
func (r *Recipe) Hash() string {
	b, _ := json.Marshal(r)
	s := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(s[:])
}

// FieldError is a recipe error at a place in the file.
type FieldError struct {
	File string `json:"file"`
	Line int    `json:"line"`
	Col  int    `json:"column"`
	Path string `json:"path"`
	Msg  string `json:"message"`
}

func (e *FieldError) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d:%d", e.Line, e.Col)
	}
	b.WriteString(": ")
	if e.Path != "" {
		b.WriteString(e.Path + ": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Load reads and parses a recipe file.
func Load(path string) (*Recipe, error) {
	data, err := localfile.ReadFile(path, "recipe", localfile.MaxConfig)
	if err != nil {
		return nil, err
	}
	r, err := Parse(path, data)
	if err != nil {
		return nil, err
	}
	return r, nil
}

// Parse decodes a recipe strictly (unknown keys and wrong types are errors)
// and validates each field; errors are *FieldError values (joined when
// there are several) that read "FILE:LINE:COL: field.path: message".
func Parse(name string, data []byte) (*Recipe, error) {
	if name == "" {
		name = "kiln.yaml"
	}
	f, err := parser.ParseBytes(data, 0)
	if err != nil {
		return nil, yamlErr(name, nil, err)
	}
	var body ast.Node
	for i, d := range f.Docs {
		if d == nil || d.Body == nil {
			continue
		}
		if body != nil {
			return nil, &FieldError{File: name, Line: d.Body.GetToken().Position.Line, Col: d.Body.GetToken().Position.Column, Msg: fmt.Sprintf("a recipe is one YAML document; found another at document %d", i+1)}
		}
		body = d.Body
	}
	if body == nil {
		return nil, &FieldError{File: name, Msg: "empty recipe: need at least a name and a cuda or torch version"}
	}
	if tn := findTag(body); tn != nil {
		pos := tn.GetToken().Position
		return nil, &FieldError{File: name, Line: pos.Line, Col: pos.Column, Path: cleanPath(tn.GetPath()), Msg: "YAML tags (!...) are not allowed in a recipe"}
	}
	body = keepFloatText(body)
	r := &Recipe{}
	if err := decodeNode(body, r); err != nil {
		return nil, yamlErr(name, body, err)
	}
	r.path = name
	if probs := r.validate(); len(probs) > 0 {
		var errs []error
		for _, p := range probs {
			errs = append(errs, positioned(name, body, p.path, p.msg))
		}
		return nil, errors.Join(errs...)
	}
	return r, nil
}

// decodeNode decodes strictly; a panic inside the YAML library (seen with
// fuzzed input) becomes an error.
func decodeNode(body ast.Node, r *Recipe) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("cannot decode this YAML: %v", p)
		}
	}()
	return yaml.NodeToValue(body, r, yaml.Strict())
}

type tagFinder struct{ found ast.Node }

func (f *tagFinder) Visit(n ast.Node) ast.Visitor {
	if _, ok := n.(*ast.TagNode); ok && f.found == nil {
		f.found = n
	}
	return f
}

func findTag(body ast.Node) ast.Node {
	f := &tagFinder{}
	ast.Walk(f, body)
	return f.found
}

// keepFloatText turns float scalars back into strings with their original
// text, so `python: 3.10` stays "3.10" instead of becoming 3.1.
func keepFloatText(n ast.Node) ast.Node {
	switch x := n.(type) {
	case *ast.FloatNode:
		tk := *x.Token
		tk.Type = token.StringType
		s := ast.String(&tk)
		s.SetPath(x.GetPath())
		return s
	case *ast.MappingNode:
		for _, mv := range x.Values {
			mv.Value = keepFloatText(mv.Value)
		}
	case *ast.MappingValueNode:
		x.Value = keepFloatText(x.Value)
	case *ast.SequenceNode:
		for i := range x.Values {
			x.Values[i] = keepFloatText(x.Values[i])
		}
	case *ast.TagNode:
		x.Value = keepFloatText(x.Value)
	}
	return n
}

func yamlErr(file string, body ast.Node, err error) error {
	var ye yaml.Error
	if !errors.As(err, &ye) || ye.GetToken() == nil {
		return &FieldError{File: file, Msg: err.Error()}
	}
	tk := ye.GetToken()
	fe := &FieldError{File: file, Line: tk.Position.Line, Col: tk.Position.Column, Msg: ye.GetMessage()}
	if body != nil {
		fe.Path = pathAt(body, tk.Position.Line, tk.Position.Column)
	}
	var te *yaml.TypeError
	var ue *yaml.UnexpectedNodeTypeError
	var uf *yaml.UnknownFieldError
	switch {
	case errors.As(err, &te):
		fe.Msg = fmt.Sprintf("expected %s, got %s", kindName(te.DstType), srcKind(te.SrcType, tk))
	case errors.As(err, &ue):
		fe.Msg = fmt.Sprintf("expected %s, got %s", nodeName(ue.Expected), nodeName(ue.Actual))
	case errors.As(err, &uf):
		key := tk.Value
		fe.Msg = fmt.Sprintf("unknown field %q", key)
		if s := suggestField(body, fe.Path, key); s != "" {
			fe.Msg += fmt.Sprintf(" (did you mean %q?)", s)
		}
	}
	return fe
}

func kindName(t reflect.Type) string {
	if t == nil {
		return "a value"
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Int, reflect.Int64, reflect.Int32, reflect.Uint, reflect.Uint64:
		return "an integer"
	case reflect.Bool:
		return "true or false"
	case reflect.Slice:
		return "a list"
	case reflect.Map, reflect.Struct:
		return "a mapping"
	}
	return t.Kind().String()
}

func srcKind(t reflect.Type, tk *token.Token) string {
	if t != nil {
		switch t.Kind() {
		case reflect.Slice:
			return "a list"
		case reflect.Map:
			return "a mapping"
		}
	}
	return fmt.Sprintf("%q", tk.Value)
}

func nodeName(t ast.NodeType) string {
	switch t {
	case ast.MappingType, ast.MappingValueType:
		return "a mapping"
	case ast.SequenceType:
		return "a list"
	case ast.StringType, ast.LiteralType:
		return "a string"
	case ast.IntegerType:
		return "an integer"
	case ast.FloatType:
		return "a number"
	case ast.BoolType:
		return "true or false"
	case ast.NullType:
		return "null"
	}
	return strings.ToLower(t.String())
}

type pathFinder struct {
	line, col int
	path      string
}

func (p *pathFinder) Visit(n ast.Node) ast.Visitor {
	if n == nil || n.GetToken() == nil {
		return p
	}
	pos := n.GetToken().Position
	if pos.Line == p.line && pos.Column == p.col && p.path == "" {
		p.path = n.GetPath()
	}
	return p
}

// pathAt returns the field path ("torch.version") of the node at line:col.
func pathAt(body ast.Node, line, col int) string {
	pf := &pathFinder{line: line, col: col}
	ast.Walk(pf, body)
	return cleanPath(pf.path)
}

func cleanPath(p string) string {
	p = strings.TrimPrefix(p, "$")
	return strings.TrimPrefix(p, ".")
}

// positioned builds a FieldError for a dotted path ("torch.version",
// "gpus[1]"), locating it in the YAML when it is there.
func positioned(file string, body ast.Node, path, msg string) *FieldError {
	fe := &FieldError{File: file, Path: path, Msg: msg}
	if body == nil {
		return fe
	}
	yp, err := yaml.PathString("$." + path)
	if err != nil {
		return fe
	}
	if n, err := yp.FilterNode(body); err == nil && n != nil && n.GetToken() != nil {
		fe.Line, fe.Col = n.GetToken().Position.Line, n.GetToken().Position.Column
	}
	return fe
}

var recipeFields = map[string][]string{}

func init() {
	walkFields("", reflect.TypeFor[Recipe]())
}

func walkFields(prefix string, t reflect.Type) {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct {
		return
	}
	for f := range t.Fields() {
		tag := strings.Split(f.Tag.Get("yaml"), ",")[0]
		if tag == "" || !f.IsExported() {
			continue
		}
		recipeFields[prefix] = append(recipeFields[prefix], tag)
		walkFields(strings.TrimPrefix(prefix+"."+tag, "."), f.Type)
	}
}

// suggestField proposes the closest known key for a misspelt one.
func suggestField(_ ast.Node, path, key string) string {
	parent := path
	if i := strings.LastIndex(parent, "."); i >= 0 {
		parent = parent[:i]
	} else {
		parent = ""
	}
	parent = regexp.MustCompile(`\[\d+\]`).ReplaceAllString(parent, "")
	return suggest.Nearest(key, recipeFields[parent])
}

type problem struct{ path, msg string }

var (
	nameRe     = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,127}$`)
	cudaRe     = regexp.MustCompile(`^\d+\.\d+(\.\d+)?$`)
	pythonRe   = regexp.MustCompile(`^3\.\d+$`)
	torchRe    = regexp.MustCompile(`^2\.\d+(\.\d+)?$`)
	variantRe  = regexp.MustCompile(`^cu\d{3}$`)
	pepRe      = regexp.MustCompile(`^\d+(\.\d+)*(\.post\d+)?$`)
	platformRe = regexp.MustCompile(`^linux/(amd64|arm64)$`)
	mirrorRe   = regexp.MustCompile(`^[a-zA-Z0-9.-]+(:\d+)?(/[a-zA-Z0-9._/-]+)?$`)
	envKeyRe   = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
)

func (r *Recipe) validate() []problem {
	var ps []problem
	add := func(path, format string, a ...any) { ps = append(ps, problem{path, fmt.Sprintf(format, a...)}) }
	if r.Name == "" {
		add("name", "required: a short name such as torch25-cu124")
	} else if !nameRe.MatchString(r.Name) {
		add("name", "%q: use lower-case letters, digits, '.', '_' and '-'", r.Name)
	}
	if r.CUDA != "" && !cudaRe.MatchString(r.CUDA) {
		add("cuda", "%q is not a CUDA version: write 12.4 or 12.4.1", r.CUDA)
	}
	switch r.CuDNN {
	case "", "auto", "none", "8", "9":
	default:
		add("cudnn", "%q: want auto, none, 8 or 9", r.CuDNN)
	}
	switch r.RuntimeBase {
	case "", "auto", "base", "runtime":
	default:
		add("runtime_base", "%q: want auto, base or runtime", r.RuntimeBase)
	}
	if r.OS != "" && osFlavor(r.OS) == nil {
		add("os", "unknown OS flavour %q (known: %s)", r.OS, strings.Join(osNames(), ", "))
	}
	if r.Python != "" && !pythonRe.MatchString(r.Python) {
		add("python", "%q: write a Python 3 minor version such as 3.11", r.Python)
	}
	if t := r.Torch; t != nil {
		if t.Version != "" && !torchRe.MatchString(t.Version) {
			add("torch.version", "%q: write a torch 2.x version such as 2.5.1 or 2.5", t.Version)
		}
		if t.Variant != "" && !variantRe.MatchString(t.Variant) {
			add("torch.variant", "%q: write a CUDA wheel variant such as cu124", t.Variant)
		}
		for _, c := range []struct{ path, v string }{{"torch.torchvision", t.Torchvision}, {"torch.torchaudio", t.Torchaudio}} {
			if c.v != "" && c.v != "true" && c.v != "false" && !cudaRe.MatchString(c.v) {
				add(c.path, "%q: want true, false or a version", c.v)
			}
		}
		if t.IndexURL != "" {
			if err := checkURL(t.IndexURL); err != nil {
				add("torch.index_url", "%v", err)
			}
		}
	}
	if fa := r.FlashAttn; fa != nil {
		if fa.Version != "" && !pepRe.MatchString(fa.Version) {
			add("flash_attn.version", "%q: write a release such as 2.7.4.post1", fa.Version)
		} else if fa.Version != "" && !strings.HasPrefix(fa.Version, "2.") {
			add("flash_attn.version", "%q: kiln knows FlashAttention 2 releases (2.x); FA3 builds from hopper/ and FA4 is the flash-attn-4 package", fa.Version)
		}
		switch fa.Build {
		case "", "auto", "wheel", "source":
		default:
			add("flash_attn.build", "%q: want auto, wheel or source", fa.Build)
		}
	}
	if b := r.BitsAndBytes; b != nil && b.Version != "" && !pepRe.MatchString(b.Version) {
		add("bitsandbytes.version", "%q: write a release such as 0.45.5", b.Version)
	}
	for i, p := range r.Pip {
		if strings.TrimSpace(p) == "" || strings.HasPrefix(strings.TrimSpace(p), "-") {
			add(fmt.Sprintf("pip[%d]", i), "%q: want a requirement such as transformers==4.46.3 (pip options are not allowed)", p)
		}
	}
	for i, name := range r.PipFromSource {
		add2 := func(format string, a ...any) { add(fmt.Sprintf("pip_from_source[%d]", i), format, a...) }
		var req string
		for _, p := range r.Pip {
			if wheelkey.NormalizeName(reqName(p)) == wheelkey.NormalizeName(name) {
				req = p
			}
		}
		switch {
		case wheelkey.NormalizeName(name) == "flash-attn":
			add2("%q: FlashAttention is compiled with flash_attn: {build: source}", name)
		case strings.TrimSpace(name) == "" || strings.ContainsAny(name, "=<>!~[; @"):
			add2("%q: want a project name from pip (e.g. pyyaml), without a version", name)
		case req == "":
			add2("%q is not in pip: list its requirement there (e.g. %s==1.0) and name the project here", name, name)
		case !isPinned(req):
			add2("%q: its requirement %q is not pinned: pin it with == so the compiled wheel can be keyed and cached", name, req)
		case slices.ContainsFunc(r.PipFromSource[:i], func(n string) bool { return wheelkey.NormalizeName(n) == wheelkey.NormalizeName(name) }):
			add2("%q is listed twice", name)
		}
	}
	for i, p := range r.Apt {
		if !regexp.MustCompile(`^[a-z0-9][a-z0-9+.-]*(=[A-Za-z0-9.+:~-]+)?$`).MatchString(p) {
			add(fmt.Sprintf("apt[%d]", i), "%q is not a Debian package name", p)
		}
	}
	for i, g := range r.GPUs {
		if _, err := cuda.GPU(g); err != nil {
			add(fmt.Sprintf("gpus[%d]", i), "%v", err)
		}
	}
	if c := r.GPUCode; c != nil && len(r.GPUs) == 0 && (c.Prune != nil && *c.Prune || c.NVIDIALibs) {
		add("gpu_code", "pruning GPU code needs the fleet: set gpus (e.g. [h100])")
	}
	for i, p := range r.Platforms {
		if !platformRe.MatchString(p) {
			add(fmt.Sprintf("platforms[%d]", i), "%q: want linux/amd64 or linux/arm64", p)
		}
		if slices.Index(r.Platforms, p) != i {
			add(fmt.Sprintf("platforms[%d]", i), "%q is listed twice", p)
		}
	}
	if a := r.App; a != nil {
		for i, f := range a.Files {
			if f.Src == "" {
				add(fmt.Sprintf("app.files[%d].src", i), "required")
			} else if filepath.IsAbs(f.Src) || strings.HasPrefix(filepath.Clean(f.Src), "..") {
				add(fmt.Sprintf("app.files[%d].src", i), "%q must be relative to the recipe and stay inside its directory", f.Src)
			}
			if f.Dst == "" {
				add(fmt.Sprintf("app.files[%d].dst", i), "required")
			}
		}
		if a.Workdir != "" && !strings.HasPrefix(a.Workdir, "/") {
			add("app.workdir", "%q must be an absolute path", a.Workdir)
		}
		for k := range a.Env {
			if !envKeyRe.MatchString(k) {
				add("app.env", "%q is not a valid environment variable name", k)
			}
		}
		for i, p := range a.Ports {
			if p <= 0 || p > 65535 {
				add(fmt.Sprintf("app.ports[%d]", i), "%d is not a port", p)
			}
		}
	}
	for i, w := range r.Weights {
		if w.Source == "" {
			add(fmt.Sprintf("weights[%d].source", i), "required: e.g. hf://org/model, s3://bucket/path or https://...")
		}
		if w.Mount == "" {
			add(fmt.Sprintf("weights[%d].mount", i), "required: the absolute path the weights are mounted at")
		} else if !strings.HasPrefix(w.Mount, "/") {
			add(fmt.Sprintf("weights[%d].mount", i), "%q must be an absolute path", w.Mount)
		}
		if w.SHA256 != "" && !regexp.MustCompile(`^(sha256:)?[0-9a-f]{64}$`).MatchString(w.SHA256) {
			add(fmt.Sprintf("weights[%d].sha256", i), "want 64 hex digits")
		}
	}
	if r.RegistryMirror != "" && (strings.Contains(r.RegistryMirror, "://") || !mirrorRe.MatchString(r.RegistryMirror)) {
		add("registry_mirror", "%q: write a registry host with an optional port and path, without a scheme (e.g. mirror.example.com:5000/dockerhub)", r.RegistryMirror)
	}
	for i, u := range r.WheelIndexes {
		if err := checkURL(u); err != nil {
			add(fmt.Sprintf("wheel_indexes[%d]", i), "%v", err)
		}
	}
	if r.PythonMirror != "" {
		if err := CheckPythonMirror(r.PythonMirror); err != nil {
			add("python_mirror", "%v", err)
		}
	}
	if wc := r.WheelCache; wc != nil {
		if wc.Repo != "" && (strings.Contains(wc.Repo, "://") || strings.Contains(wc.Repo, "@") || strings.Contains(wc.Repo[strings.LastIndex(wc.Repo, "/")+1:], ":")) {
			add("wheel_cache.repo", "%q: write a registry repository without scheme, tag or digest (e.g. ghcr.io/acme/wheels)", wc.Repo)
		}
		if wc.Mirror != "" && (strings.Contains(wc.Mirror, "://") || strings.Contains(wc.Mirror, "/")) {
			add("wheel_cache.mirror", "%q: write host[:port], without scheme or path (e.g. mirror.example.com:5000)", wc.Mirror)
		}
	}
	if b := r.Build; b != nil {
		if b.MemoryGB < 0 {
			add("build.memory_gb", "must be positive")
		}
		if b.CPUs < 0 {
			add("build.cpus", "must be positive")
		}
	}
	for i, t := range r.Test {
		if strings.TrimSpace(t) == "" {
			add(fmt.Sprintf("test[%d]", i), "empty command")
		}
	}
	controlChars("", reflect.ValueOf(r).Elem(), add)
	return ps
}

// controlChars refuses control characters (a newline, a tab, NUL, ESC...)
// in every string of the recipe but its description: each field becomes
// one word or one line of the image config, an LLB operation and the
// exported Dockerfile, where a newline would start a new instruction
// (workdir: "/app\nRUN touch /x") that kiln build never runs.
func controlChars(path string, v reflect.Value, add func(path, format string, a ...any)) {
	switch v.Kind() {
	case reflect.Pointer:
		if !v.IsNil() {
			controlChars(path, v.Elem(), add)
		}
	case reflect.Struct:
		t := v.Type()
		for i := range t.NumField() {
			f := t.Field(i)
			tag := strings.Split(f.Tag.Get("yaml"), ",")[0]
			if tag == "" || tag == "-" || !f.IsExported() || tag == "description" {
				continue
			}
			p := tag
			if path != "" {
				p = path + "." + tag
			}
			controlChars(p, v.Field(i), add)
		}
	case reflect.Slice:
		for i := range v.Len() {
			controlChars(fmt.Sprintf("%s[%d]", path, i), v.Index(i), add)
		}
	case reflect.Map:
		keys := v.MapKeys()
		slices.SortFunc(keys, func(a, b reflect.Value) int { return strings.Compare(a.String(), b.String()) })
		for _, k := range keys {
			controlChars(path+"."+k.String(), k, add)
			controlChars(path+"."+k.String(), v.MapIndex(k), add)
		}
	case reflect.String:
		if i := strings.IndexFunc(v.String(), unicode.IsControl); i >= 0 {
			r, _ := utf8.DecodeRuneInString(v.String()[i:])
			add(path, "%q holds the control character %U: a recipe value is one line of printable text", v.String(), r)
		}
	}
}

func checkURL(s string) error {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("%q: want an http(s) URL of a PEP 503/691 simple index", s)
	}
	return nil
}

func osFlavor(name string) *OSFlavor { return (&resolver{db: mustDB()}).osFlavor(name) }

func (s *resolver) osFlavor(name string) *OSFlavor {
	db := s.db
	for i := range db.Images.OS {
		if db.Images.OS[i].Name == name {
			return &db.Images.OS[i]
		}
	}
	return nil
}

func osNames() []string {
	var out []string
	for _, o := range mustDB().Images.OS {
		out = append(out, o.Name)
	}
	return out
}
