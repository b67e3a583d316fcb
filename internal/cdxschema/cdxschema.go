// Package cdxschema validates CycloneDX 1.6 JSON against the published
// schema as the CycloneDX Go module ships it (github.com/CycloneDX/
// cyclonedx-go's schema directory, found in the module cache with go
// list): no download at test time, no vendored copy. Tests only.
package cdxschema

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"

	cdx "github.com/CycloneDX/cyclonedx-go"
	"github.com/santhosh-tekuri/jsonschema/v6"
)

var (
	once   sync.Once
	schema *jsonschema.Schema
	err    error
)

func compile() (*jsonschema.Schema, error) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/CycloneDX/cyclonedx-go").Output()
	if err != nil {
		return nil, fmt.Errorf("go list -m github.com/CycloneDX/cyclonedx-go: %v", err)
	}
	dir := filepath.Join(strings.TrimSpace(string(out)), "schema")
	c := jsonschema.NewCompiler()
	for url, file := range map[string]string{
		"http://cyclonedx.org/schema/bom-1.6.schema.json":  "bom-1.6.schema.json",
		"http://cyclonedx.org/schema/spdx.schema.json":     "spdx.schema.json",
		"http://cyclonedx.org/schema/jsf-0.82.schema.json": "jsf-0.82.schemax.json",
	} {
		f, err := os.Open(filepath.Join(dir, file))
		if err != nil {
			return nil, err
		}
		doc, err := jsonschema.UnmarshalJSON(f)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("%s: %v", file, err)
		}
		if err := c.AddResource(url, doc); err != nil {
			return nil, err
		}
	}
	return c.Compile("http://cyclonedx.org/schema/bom-1.6.schema.json")
}

// Validate checks b against the CycloneDX 1.6 JSON schema and that the
// CycloneDX Go library decodes it as a 1.6 BOM.
func Validate(b []byte) error {
	once.Do(func() { schema, err = compile() })
	if err != nil {
		return err
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
	if err != nil {
		return err
	}
	if err := schema.Validate(doc); err != nil {
		return fmt.Errorf("not CycloneDX 1.6: %v", err)
	}
	var bom cdx.BOM
	if err := cdx.NewBOMDecoder(bytes.NewReader(b), cdx.BOMFileFormatJSON).Decode(&bom); err != nil {
		return fmt.Errorf("cyclonedx-go: %v", err)
	}
	if bom.SpecVersion != cdx.SpecVersion1_6 {
		return fmt.Errorf("spec version %v", bom.SpecVersion)
	}
	return nil
}
