package compatcmd

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/kiln-build/kiln/internal/termtable"
)

func TestCompatDriver(t *testing.T) {
	code, out, _ := run(t, "compat", "driver", "--cuda", "12.8", "--driver", "550.54", "--gpu", "rtx4090")
	if code != 1 || !strings.Contains(out, "NOT compatible") || !strings.Contains(out, "NVIDIA_REQUIRE_CUDA") || !strings.Contains(out, "brand geforcertx") {
		t.Errorf("code %d\n%s", code, out)
	}
	code, out, _ = run(t, "compat", "driver", "--cuda", "12.8", "--driver", "550.54", "--gpu", "rtx4090", "--json")
	var v map[string]any
	if code != 1 || json.Unmarshal([]byte(out), &v) != nil || v["compatible"] != false || v["mode"] != "none" || v["min_driver"] != "570.26" || !strings.Contains(v["reason"].(string), "brand clauses") {
		t.Errorf("json: %d %s", code, out)
	}
	code, out, _ = run(t, "compat", "driver", "--cuda", "12.4", "--driver", "550.54.15", "--json")
	if code != 0 || !strings.Contains(out, `"mode": "native"`) || !strings.Contains(out, `"compatible": true`) {
		t.Errorf("native: %d %s", code, out)
	}
	code, out, _ = run(t, "compat", "driver", "--cuda", "13.0", "--driver", "550.54.15", "--gpu", "h100")
	if code != 0 || !strings.Contains(out, "mode: forward-compat") {
		t.Errorf("fwd: %d %s", code, out)
	}
	for _, args := range [][]string{
		{"compat", "driver", "--cuda", "12.8"},
		{"compat", "driver", "--cuda", "x", "--driver", "550"},
		{"compat", "driver", "--cuda", "12.8", "--driver", "550", "--gpu", "potato"},
		{"compat"},
		{"compat", "gpu", "h100"},
		{"compat", "gpu", "potato", "--cuda", "12.4"},
	} {
		if code, _, _ := run(t, args...); code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
	}
}

func TestCompatGPU(t *testing.T) {
	code, out, _ := run(t, "compat", "gpu", "t4", "--cuda", "13.0", "--json")
	var v map[string]any
	if code != 0 || json.Unmarshal([]byte(out), &v) != nil || v["compute_capability"] != "7.5" || v["supported"] != true || v["reason"] == "" {
		t.Errorf("t4: %d %s", code, out)
	}
	code, out, _ = run(t, "compat", "gpu", "sm_70", "--cuda", "13.0")
	if code != 1 || !strings.Contains(out, "CUDA 13.0 dropped sm_70") {
		t.Errorf("v100: %d %s", code, out)
	}
	code, out, _ = run(t, "compat", "gpu", "h100", "--cuda", "11.7")
	if code != 1 || !strings.Contains(out, "sm_90 needs CUDA ≥ 11.8") {
		t.Errorf("h100: %d %s", code, out)
	}
}

// compat driver's verdict fits 80 columns on a pipe (a reason ran to 367):
// wrapped, every word kept.
func TestCompatDriverFitsEightyColumns(t *testing.T) {
	_, out, _ := run(t, "compat", "driver", "--cuda", "12.8", "--driver", "550.54", "--gpu", "rtx4090")
	for _, l := range strings.Split(out, "\n") {
		if n := termtable.Len(l); n > 80 {
			t.Errorf("%d columns: %q", n, l)
		}
	}
	for _, w := range []string{"NOT compatible", "brand geforcertx", "try: "} {
		if !strings.Contains(out, w) {
			t.Errorf("no %q in\n%s", w, out)
		}
	}
}
