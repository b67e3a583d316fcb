// Package spdxcheck parses SPDX 2.3 JSON with the SPDX project's own Go
// tools (github.com/spdx/tools-golang: not syft) and validates the
// document's element IDs and relationships. Tests only. The SPDX JSON
// schema itself is not on the module proxy, so there is no schema check
// here; the CycloneDX BOM of the same components is schema-validated
// (internal/cdxschema).
package spdxcheck

import (
	"bytes"
	"fmt"

	spdxjson "github.com/spdx/tools-golang/json"
	"github.com/spdx/tools-golang/spdxlib"
)

// Validate parses b as SPDX and checks it is a 2.3 document whose
// relationships name existing elements and which describes a package.
func Validate(b []byte) error {
	doc, err := spdxjson.Read(bytes.NewReader(b))
	if err != nil {
		return fmt.Errorf("tools-golang: %v", err)
	}
	if doc.SPDXVersion != "SPDX-2.3" {
		return fmt.Errorf("spdxVersion %q", doc.SPDXVersion)
	}
	if err := spdxlib.ValidateDocument(doc); err != nil {
		return fmt.Errorf("tools-golang: %v", err)
	}
	ids, err := spdxlib.GetDescribedPackageIDs(doc)
	if err != nil || len(ids) == 0 {
		return fmt.Errorf("describes no package: %v", err)
	}
	return nil
}
