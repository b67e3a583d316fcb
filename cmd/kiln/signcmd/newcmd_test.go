package signcmd

import (
	"reflect"
	"testing"

	"github.com/kiln-build/kiln/cmd/kiln/internal/cmdtest"
)

// kiln sign's and kiln verify's flags reach their options.
func TestNewCmdSignVerifyOptions(t *testing.T) {
	s, err := cmdtest.Options(t, NewCmdSign, "reg/acme/serve:1", "--key", "k.pem", "--format", "legacy", "--json", "--insecure-registry", "reg")
	if err != nil {
		t.Fatal(err)
	}
	if s.Ref != "reg/acme/serve:1" || s.Key != "k.pem" || s.Format != "legacy" || !s.JSON || !reflect.DeepEqual(s.InsecureRegistry, []string{"reg"}) || s.Registry == nil {
		t.Fatalf("sign options %+v", s)
	}
	v, err := cmdtest.Options(t, NewCmdVerify, "reg/a:1", "reg/b:2", "--key", "policy.yaml", "--json")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(v.Refs, []string{"reg/a:1", "reg/b:2"}) || v.Key != "policy.yaml" || !v.JSON || v.Registry == nil {
		t.Fatalf("verify options %+v", v)
	}
}
