package recipes

import (
	"embed"
	"fmt"
	"io/fs"
	"slices"
	"strings"
)

//go:embed catalog/*.yaml
var catalogFS embed.FS

// DefaultRecipe is the catalog recipe `kiln recipes init` writes when no
// name is given: the stack most users pick today, NVIDIA's CUDA 12.8
// Ubuntu 24.04 images from Docker Hub with torch 2.11.0+cu128 (the newest
// torch with cu128 wheels; cu130 needs driver >= 580).
const DefaultRecipe = "torch211-cu128"

// OfflineRecipe is the stack kiln's fixtures carry offline, the one
// `make demo` and the end-to-end tests build: CUDA 12.4.1, torch
// 2.6.0+cu124, Debian 13, bases in the local fixture registry.
const OfflineRecipe = "debian13-cu124"

// CatalogEntry is a curated recipe embedded in kiln.
type CatalogEntry struct {
	Name        string `json:"name"`
	Description string `json:"description"`
	Source      []byte `json:"-"`
}

// Catalog lists the curated recipes, sorted by name.
func Catalog() ([]CatalogEntry, error) {
	files, err := fs.Glob(catalogFS, "catalog/*.yaml")
	if err != nil {
		return nil, err
	}
	var out []CatalogEntry
	for _, f := range files {
		b, err := catalogFS.ReadFile(f)
		if err != nil {
			return nil, err
		}
		r, err := Parse(f, b)
		if err != nil {
			return nil, fmt.Errorf("catalog: %w", err)
		}
		out = append(out, CatalogEntry{Name: r.Name, Description: r.Description, Source: b})
	}
	slices.SortFunc(out, func(a, b CatalogEntry) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// CatalogRecipe returns a curated recipe's YAML by name.
func CatalogRecipe(name string) ([]byte, error) {
	all, err := Catalog()
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range all {
		if e.Name == name {
			return e.Source, nil
		}
		names = append(names, e.Name)
	}
	return nil, fmt.Errorf("no recipe %q in the catalog (have: %s)", name, strings.Join(names, ", "))
}
