package testkit

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// daemonCalls are the calls that start a daemon (containerd, dockerd,
// stargz, sshd) or reach BuildKit: a test file making one belongs to the
// e2e tier.
var daemonCalls = map[string]bool{
	"testdaemon.StartContainerd": true, "testdaemon.StartDockerd": true, "testdaemon.StartStargz": true,
	"testdaemon.Containerd": true, "testdaemon.Containerd2Bin": true, "testdaemon.StargzBin": true,
	"testdaemon.SkipShort": true, "testdaemon.AsSocketStranger": true,
	"e2eEnv": true, "buildkitEnv": true, "requireSSH": true,
}

// TestDaemonTestsNamedE2E holds the rule the Makefile's tiers are chosen
// by: a test file that starts a daemon or uses BuildKit is named
// *e2e_test.go (its package then runs in the e2e tier, without -short and
// without the race detector). Misnamed, its tests would only ever run in
// the fast tier, where -short skips them: green, and never run.
func TestDaemonTestsNamedE2E(t *testing.T) {
	t.Parallel()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	var misnamed []string
	fset := token.NewFileSet()
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if d.IsDir() {
			// integration/ is its own tier (a build tag); testdata and
			// dot directories hold no kiln tests.
			if rel == "integration" || rel == "vendor" || d.Name() == "testdata" || (strings.HasPrefix(d.Name(), ".") && rel != ".") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, "_test.go") || strings.HasSuffix(p, "e2e_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, p, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			var fn string
			switch e := call.Fun.(type) {
			case *ast.Ident:
				fn = e.Name
			case *ast.SelectorExpr:
				if x, ok := e.X.(*ast.Ident); ok {
					fn = x.Name + "." + e.Sel.Name
				}
			}
			if daemonCalls[fn] {
				misnamed = append(misnamed, rel+" calls "+fn)
				return false
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(misnamed)
	for _, m := range slices.Compact(misnamed) {
		t.Errorf("%s: a test that starts a daemon or uses BuildKit goes in a file named *e2e_test.go (the e2e tier's rule, Makefile E2E_PKGS)", m)
	}
}
