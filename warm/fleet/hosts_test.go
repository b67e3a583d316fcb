package fleet

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseHosts(t *testing.T) {
	home, _ := os.UserHomeDir()
	good := `defaults:
  user: ubuntu
  identity_file: ~/.ssh/fleet
  target: containerd
  namespace: k8s.io
hosts:
  - name: gpu-1
    address: 10.0.0.1
  - address: 10.0.0.2:2222
    user: root
    mode: push
    target: oci:/var/cache/kiln/oci
  - name: v6
    address: "[fd00::1]:22"
`
	hosts, err := ParseHosts("gpus.yaml", []byte(good))
	if err != nil {
		t.Fatal(err)
	}
	want := []Host{
		{Name: "gpu-1", Address: "10.0.0.1:22", User: "ubuntu", IdentityFile: filepath.Join(home, ".ssh/fleet"), Target: "containerd", Namespace: "k8s.io", Mode: ModePull},
		{Name: "10.0.0.2:2222", Address: "10.0.0.2:2222", User: "root", IdentityFile: filepath.Join(home, ".ssh/fleet"), Target: "oci:/var/cache/kiln/oci", Namespace: "k8s.io", Mode: ModePush},
		{Name: "v6", Address: "[fd00::1]:22", User: "ubuntu", IdentityFile: filepath.Join(home, ".ssh/fleet"), Target: "containerd", Namespace: "k8s.io", Mode: ModePull},
	}
	if len(hosts) != len(want) {
		t.Fatalf("got %d hosts", len(hosts))
	}
	for i := range want {
		if hosts[i] != want[i] {
			t.Errorf("host %d:\n got %+v\nwant %+v", i, hosts[i], want[i])
		}
	}
}

func TestParseHostsErrors(t *testing.T) {
	for _, tc := range []struct {
		name, yaml string
		want       []string // substrings, each must appear
	}{
		{"unknown field", "hosts:\n  - address: a\n    adress: b\n", []string{"gpus.yaml:3:5", `unknown field "adress"`}},
		{"no address", "hosts:\n  - name: a\n", []string{"gpus.yaml:2:", "hosts[0]", "address is required"}},
		{"bad mode", "hosts:\n  - address: a\n    mode: carry\n", []string{"gpus.yaml:3:11", "hosts[0].mode", `"carry" is not pull or push`}},
		{"bad port", "hosts:\n  - address: a:99999\n", []string{"gpus.yaml:2:14", "hosts[0].address", "port must be 1-65535"}},
		{"user in address", "hosts:\n  - address: root@a\n", []string{"hosts[0].address", "user:"}},
		{"duplicate", "hosts:\n  - {name: a, address: x}\n  - {name: a, address: y}\n", []string{"hosts[1].name", "also hosts[0]"}},
		{"no hosts", "defaults:\n  user: u\n", []string{"hosts", "no hosts listed"}},
		{"defaults address", "defaults:\n  address: x\nhosts:\n  - address: y\n", []string{"gpus.yaml:2:12", "defaults.address"}},
		{"wrong type", "hosts: 3\n", []string{"gpus.yaml:1"}},
		{"empty", "", []string{"empty hosts file"}},
		{"two docs", "hosts: []\n---\nhosts: []\n", []string{"one YAML document"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseHosts("gpus.yaml", []byte(tc.yaml))
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

func TestShellQuote(t *testing.T) {
	for in, want := range map[string]string{
		"kiln":                     "kiln",
		"oci:/var/cache/x":         "oci:/var/cache/x",
		"":                         "''",
		"a b":                      "'a b'",
		"it's":                     `'it'\''s'`,
		"$(rm -rf /)":              "'$(rm -rf /)'",
		"--limit-rate=100MiB":      "--limit-rate=100MiB",
		"reg:5000/a/b@sha256:0123": "reg:5000/a/b@sha256:0123",
	} {
		if got := shq(in); got != want {
			t.Errorf("shq(%q) = %s, want %s", in, got, want)
		}
	}
}
