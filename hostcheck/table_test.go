package hostcheck

import (
	"strings"
	"testing"

	"github.com/kiln-build/kiln/internal/termtable"
	"github.com/kiln-build/kiln/internal/testkit"
)

func TestWriteTableFitsEightyColumns(t *testing.T) {
	long := "the image's NVIDIA_REQUIRE_CUDA refuses this host at container start: cuda>=12.8 brand=tesla,driver>=470,driver<471 brand=unknown,driver>=535,driver<536 brand=nvidia,driver>=550,driver<551"
	r := &Report{
		Host:  &Host{Source: "host-info /home/someone/captures/gpu-node-17.us-east-2.compute.internal.json", Hostname: "gpu-node-17.us-east-2.compute.internal"},
		Image: &Image{Ref: "registry.example.com:5000/some-team/a-rather-long-repository-name/serve:2026-12-01-cu124", CUDA: "12.8"},
		Items: []Item{
			{Title: "CUDA driver compatibility with the image and its forward-compat libraries", Status: Fail, Summary: long,
				Evidence: []string{long}, Fix: []string{"sudo apt-get install -y nvidia-driver-570-server-open && sudo reboot  # then: kiln host check --image registry.example.com:5000/some-team/serve:2026-12-01-cu124"}},
			{Title: "disk", Status: Pass, Summary: "412.0 GiB free on /var/lib/containerd"},
		},
	}
	var b strings.Builder
	if err := r.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(b.String(), "\n") {
		if !testkit.Fits(l, 80) {
			t.Errorf("%d columns: %q", termtable.Len(l), l)
		}
	}
	// Evidence and fixes are wrapped, not cut: every word is there.
	if !strings.Contains(b.String(), "driver<551") || !strings.Contains(b.String(), "serve:2026-12-01-cu124") {
		t.Errorf("evidence or fix lost:\n%s", b.String())
	}
	if strings.Contains(b.String(), "\x1b[") {
		t.Errorf("colour without Color(true):\n%s", b.String())
	}
	b.Reset()
	if err := r.WriteTable(&b, termtable.Color(true)); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "\x1b[31mFAIL\x1b[0m") {
		t.Errorf("FAIL not red with Color(true):\n%q", b.String())
	}
}
