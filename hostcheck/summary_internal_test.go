package hostcheck

import "testing"

// A host of identical GPUs says a finding once, with the count (the
// demo's two H100s said "PTX JIT needs a newer driver" twice in one line);
// different findings keep their order.
func TestJoinPerGPU(t *testing.T) {
	got := joinPerGPU([]string{
		"NVIDIA H100 80GB HBM3: PTX JIT needs a newer driver",
		"NVIDIA L4: no kernel image for sm_89",
		"NVIDIA H100 80GB HBM3: PTX JIT needs a newer driver",
	})
	want := "NVIDIA H100 80GB HBM3: PTX JIT needs a newer driver (2 GPUs); NVIDIA L4: no kernel image for sm_89"
	if got != want {
		t.Errorf("got  %q\nwant %q", got, want)
	}
	if got := joinPerGPU([]string{"a"}); got != "a" {
		t.Errorf("one finding: %q", got)
	}
}
