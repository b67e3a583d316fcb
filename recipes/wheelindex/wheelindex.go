// Package wheelindex is a client for Python package indexes: the PEP 503
// HTML simple API and the PEP 691 JSON simple API. It lists a project's
// files with their sha256 and picks the wheel for a Python version and
// platform.
package wheelindex

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"io"
	"mime"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"

	"github.com/kiln-build/kiln/internal/networds"
	"github.com/kiln-build/kiln/internal/redact"
)

// Accept asks for PEP 691 JSON first, HTML as a fallback.
const Accept = "application/vnd.pypi.simple.v1+json, application/vnd.pypi.simple.v1+html;q=0.2, text/html;q=0.01"

const jsonType = "application/vnd.pypi.simple.v1+json"

// File is one distribution file of a project.
type File struct {
	Filename       string `json:"filename"`
	URL            string `json:"url"`
	SHA256         string `json:"sha256,omitempty"`
	RequiresPython string `json:"requires_python,omitempty"`
	Yanked         bool   `json:"yanked,omitempty"`
}

// Client fetches project pages.
type Client struct {
	HTTP *http.Client
	// Complete refuses an HTML page that does not end its document
	// (compat refresh: a page cut short reads as releases removed).
	// Off for lock, whose mirrors may serve minimal pages.
	Complete bool
	// Setting names what points kiln at the index ("--wheel-index,
	// $KILN_WHEEL_INDEX or the recipe's wheel_indexes"): an index that
	// cannot be reached is said to be set there.
	Setting string
}

func (c *Client) http() *http.Client {
	if c == nil || c.HTTP == nil {
		return http.DefaultClient
	}
	return c.HTTP
}

var normRe = regexp.MustCompile(`[-_.]+`)

// Normalize is the PEP 503 project-name normalization.
func Normalize(name string) string { return strings.ToLower(normRe.ReplaceAllString(name, "-")) }

// ProjectURL is INDEX/<normalized>/, the project's path joined to the
// index URL's path (a query string stays the query).
func ProjectURL(index, project string) string {
	return JoinURL(index, Normalize(project)+"/")
}

// JoinURL is base with elem joined to its path: a query string (an
// index's ?token=…) and a fragment stay where they are, after the path.
func JoinURL(base, elem string) string {
	u, err := url.Parse(base)
	if err != nil || (u.RawQuery == "" && u.Fragment == "") {
		return strings.TrimSuffix(base, "/") + "/" + elem
	}
	u.Path = strings.TrimSuffix(u.Path, "/") + "/" + elem
	u.RawPath = ""
	return u.String()
}

// maxPage bounds an index page: the largest (torch's, every wheel of
// every release) is a few MiB.
const maxPage = 64 << 20

// Files lists project's files on the index at indexURL.
func (c *Client) Files(ctx context.Context, indexURL, project string) ([]File, error) {
	u := ProjectURL(indexURL, project)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", Accept)
	resp, err := c.http().Do(req)
	if err != nil {
		return nil, c.unreachable(indexURL, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound {
		return nil, fmt.Errorf("wheel index %s: no project %q (404)", indexURL, project)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("wheel index %s: %s", u, resp.Status)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxPage+1))
	if err != nil {
		return nil, fmt.Errorf("wheel index %s: %w", u, err)
	}
	if len(body) > maxPage {
		return nil, fmt.Errorf("wheel index %s: the page is larger than %d MiB; refused rather than cut", u, maxPage>>20)
	}
	base := resp.Request.URL
	ct, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if ct == jsonType {
		return parseJSON(base, body)
	}
	// A PEP 503 page ends its document; one cut short (a dropped
	// connection behind a proxy that closed the chunked body cleanly)
	// would list fewer files and read as releases removed.
	if tail := strings.ToLower(string(bytes.TrimSpace(body))); c.Complete && !strings.HasSuffix(tail, "</html>") && !strings.HasSuffix(tail, "</body>") {
		return nil, fmt.Errorf("wheel index %s: the page is cut short (no closing </html>)", u)
	}
	return parseHTML(base, body)
}

// unreachable is an index that did not answer, in words: the URL, what
// the network did, and the setting that names it.
func (c *Client) unreachable(indexURL string, err error) error {
	what := networds.Of(err)
	if what == "" {
		what = redact.String(err.Error())
	}
	set := ""
	if c != nil && c.Setting != "" {
		set = " (set by " + c.Setting + ")"
	}
	return fmt.Errorf("wheel index %s%s: cannot reach it: %s: %w", redact.String(indexURL), set, what, errNoAnswer)
}

// errNoAnswer marks an index that could not be reached.
var errNoAnswer = errors.New("check the URL, or point the setting at a proxy this host can reach")

type jsonPage struct {
	Meta struct {
		APIVersion string `json:"api-version"`
	} `json:"meta"`
	Files []struct {
		Filename       string            `json:"filename"`
		URL            string            `json:"url"`
		Hashes         map[string]string `json:"hashes"`
		RequiresPython string            `json:"requires-python"`
		Yanked         any               `json:"yanked"`
	} `json:"files"`
}

func parseJSON(base *url.URL, body []byte) ([]File, error) {
	var p jsonPage
	if err := json.Unmarshal(body, &p); err != nil {
		return nil, fmt.Errorf("PEP 691 page %s: %w", base, err)
	}
	if !strings.HasPrefix(p.Meta.APIVersion, "1.") {
		return nil, fmt.Errorf("PEP 691 page %s: unsupported api-version %q", base, p.Meta.APIVersion)
	}
	var out []File
	for _, f := range p.Files {
		u, err := base.Parse(f.URL)
		if err != nil {
			continue
		}
		sha := f.Hashes["sha256"]
		if sha == "" {
			sha = fragmentSHA(u)
		}
		u.Fragment = ""
		yanked := false
		switch y := f.Yanked.(type) {
		case bool:
			yanked = y
		case string:
			yanked = true
		}
		out = append(out, File{Filename: f.Filename, URL: u.String(), SHA256: strings.ToLower(sha), RequiresPython: f.RequiresPython, Yanked: yanked})
	}
	return out, nil
}

var (
	anchorRe = regexp.MustCompile(`(?is)<a\s+([^>]*)>(.*?)</a>`)
	attrRe   = regexp.MustCompile(`(?is)([a-z0-9_:-]+)\s*=\s*(?:"([^"]*)"|'([^']*)'|([^\s>]+))`)
	tagRe    = regexp.MustCompile(`<[^>]*>`)
)

func parseHTML(base *url.URL, body []byte) ([]File, error) {
	var out []File
	for _, m := range anchorRe.FindAllSubmatch(body, -1) {
		attrs := map[string]string{}
		for _, a := range attrRe.FindAllSubmatch(m[1], -1) {
			v := string(a[2]) + string(a[3]) + string(a[4])
			attrs[strings.ToLower(string(a[1]))] = html.UnescapeString(v)
		}
		href, ok := attrs["href"]
		if !ok {
			continue
		}
		u, err := base.Parse(href)
		if err != nil {
			continue
		}
		name := strings.TrimSpace(html.UnescapeString(tagRe.ReplaceAllString(string(m[2]), "")))
		if name == "" {
			name = u.Path[strings.LastIndex(u.Path, "/")+1:]
		}
		sha := fragmentSHA(u)
		u.Fragment = ""
		_, yanked := attrs["data-yanked"]
		out = append(out, File{Filename: name, URL: u.String(), SHA256: sha, RequiresPython: attrs["data-requires-python"], Yanked: yanked})
	}
	return out, nil
}

func fragmentSHA(u *url.URL) string {
	if v, ok := strings.CutPrefix(u.Fragment, "sha256="); ok {
		return strings.ToLower(v)
	}
	return ""
}

// Wheel is a parsed wheel file name (PEP 427).
type Wheel struct {
	Name, Version, Build, Python, ABI, Platform string
}

// ParseWheel splits NAME-VER(-BUILD)?-PY-ABI-PLAT.whl.
func ParseWheel(filename string) (Wheel, bool) {
	base, ok := strings.CutSuffix(filename, ".whl")
	if !ok {
		return Wheel{}, false
	}
	p := strings.Split(base, "-")
	switch len(p) {
	case 5:
		return Wheel{Name: p[0], Version: p[1], Python: p[2], ABI: p[3], Platform: p[4]}, true
	case 6:
		return Wheel{Name: p[0], Version: p[1], Build: p[2], Python: p[3], ABI: p[4], Platform: p[5]}, true
	}
	return Wheel{}, false
}

// VersionMatches is pip's `==` for a pinned version: a local version
// (+cu124) must match exactly when given, and matches any local label when not.
func VersionMatches(fileVersion, want string) bool {
	if fileVersion == want {
		return true
	}
	return !strings.Contains(want, "+") && strings.HasPrefix(fileVersion, want+"+")
}

// PythonOK reports whether a wheel's python/abi tags load on CPython X.Y.
func PythonOK(w Wheel, python string) bool {
	maj, min, _ := strings.Cut(python, ".")
	want := "cp" + maj + min
	for _, t := range strings.Split(w.Python, ".") {
		switch {
		case t == want, t == "py"+maj, t == "py"+maj+min:
			return true
		case strings.HasPrefix(t, "cp"+maj) && strings.Contains(w.ABI, "abi3"):
			n, err1 := strconv.Atoi(strings.TrimPrefix(t, "cp"+maj))
			m, err2 := strconv.Atoi(min)
			if err1 == nil && err2 == nil && n <= m {
				return true
			}
		}
	}
	return false
}

// PlatformOK reports whether a wheel's platform tag runs on an OCI platform.
func PlatformOK(w Wheel, platform string) bool {
	arch := map[string]string{"linux/amd64": "x86_64", "linux/arm64": "aarch64"}[platform]
	for _, t := range strings.Split(w.Platform, ".") {
		if t == "any" || (arch != "" && strings.HasPrefix(t, "linux") && strings.HasSuffix(t, "_"+arch)) || (arch != "" && strings.HasPrefix(t, "manylinux") && strings.HasSuffix(t, "_"+arch)) {
			return true
		}
	}
	return false
}

// SourceArchive finds project==version's source archive (an sdist,
// NAME-VERSION.tar.gz) among files: what pip compiles when no wheel fits.
func SourceArchive(files []File, project, version string) (File, bool) {
	for _, f := range files {
		base, ok := strings.CutSuffix(f.Filename, ".tar.gz")
		if !ok || f.Yanked {
			continue
		}
		i := strings.LastIndex(base, "-")
		if i < 0 || Normalize(base[:i]) != Normalize(project) || !VersionMatches(base[i+1:], version) {
			continue
		}
		return f, true
	}
	return File{}, false
}

// Select picks the wheel of project==version for python on platform,
// preferring the exact file name prefer when it is listed.
func Select(files []File, project, version, python, platform, prefer string) (File, error) {
	var cands []File
	for _, f := range files {
		if f.Yanked {
			continue
		}
		w, ok := ParseWheel(f.Filename)
		if !ok || Normalize(w.Name) != Normalize(project) || !VersionMatches(w.Version, version) {
			continue
		}
		if !PythonOK(w, python) || !PlatformOK(w, platform) {
			continue
		}
		if prefer != "" && f.Filename == prefer {
			return f, nil
		}
		cands = append(cands, f)
	}
	if len(cands) == 0 {
		return File{}, fmt.Errorf("no %s==%s wheel for Python %s on %s", project, version, python, platform)
	}
	// Prefer specific CPython wheels over generic ones, then the first listed.
	for _, f := range cands {
		w, _ := ParseWheel(f.Filename)
		if strings.HasPrefix(w.Python, "cp") {
			return f, nil
		}
	}
	return cands[0], nil
}
