package hostcheck

import (
	"strings"
	"testing"
)

// Which compression the host's runtimes pull, and the verdict for an image
// with zstd layers: every reachable Docker/containerd must pull zstd for
// the zstd variant to be named; none that can fails a zstd image.
func TestPullCompression(t *testing.T) {
	docker := func(v string) Engine {
		return Engine{Kind: EngineDocker, Socket: "/run/docker.sock", Reachable: true, Version: v, CanBuild: true}
	}
	ctrd := func(v string) Engine {
		return Engine{Kind: EngineContainerd, Socket: "/run/containerd/containerd.sock", Reachable: true, Version: v}
	}
	for _, tc := range []struct {
		name    string
		engines []Engine
		layers  []string // the image's; nil: no image
		pull    string
		status  Status
		want    []string
	}{
		{"docker 20.10", []Engine{docker("20.10.24+dfsg1")}, nil, "gzip", Pass, []string{"pull the gzip image (TAG): docker 20.10.24+dfsg1 cannot pull zstd", "zstd needs Docker ≥ 23.0"}},
		{"docker 23.0", []Engine{docker("23.0.1")}, nil, "zstd", Pass, []string{"pull the zstd variant (TAG-zstd)", "docker 23.0.1 pulls zstd and gzip layers"}},
		{"docker 27", []Engine{docker("27.3.1")}, nil, "zstd", Pass, nil},
		{"containerd 1.4", []Engine{ctrd("v1.4.13")}, nil, "gzip", Pass, []string{"zstd needs containerd ≥ 1.5"}},
		{"containerd 1.6 (Debian)", []Engine{ctrd("1.6.20~ds1")}, nil, "zstd", Pass, nil},
		{"containerd 2.1", []Engine{ctrd("v2.1.4")}, nil, "zstd", Pass, nil},
		{"both up, docker old", []Engine{docker("20.10.24"), ctrd("1.6.20")}, nil, "gzip", Pass, []string{"docker 20.10.24 cannot pull zstd"}},
		{"version unreadable", []Engine{docker("")}, nil, "gzip", Pass, []string{"version unreadable, assumed to pull gzip only"}},
		{"only buildkit", []Engine{{Kind: EngineBuildkit, Reachable: true, CanBuild: true}}, nil, "", Fail, nil},
		{"zstd image, docker 20.10", []Engine{docker("20.10.24")}, []string{"zstd"}, "gzip", Fail, []string{"the image has zstd layers and docker 20.10.24 cannot pull them", "--compression both"}},
		{"zstd image, containerd can, docker cannot", []Engine{docker("20.10.24"), ctrd("1.6.20")}, []string{"zstd"}, "gzip", Warn, []string{"containerd 1.6.20 can pull them, docker 20.10.24 cannot"}},
		{"gzip image, docker 20.10", []Engine{docker("20.10.24")}, []string{"gzip"}, "gzip", Pass, nil},
		{"zstd image, docker 24", []Engine{docker("24.0.7")}, []string{"gzip", "zstd"}, "zstd", Pass, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var im *Image
			if tc.layers != nil {
				im = &Image{Ref: "r/app:v1", Source: "image", LayerCompression: tc.layers, DeclaredArchs: []string{}}
			}
			r := Check(&Host{Engines: tc.engines}, im, Options{})
			it := r.Item(IDEngine)
			if r.PullCompression != tc.pull || it.Status != tc.status {
				t.Errorf("pull %q status %s, want %q %s: %s", r.PullCompression, it.Status, tc.pull, tc.status, it.Summary)
			}
			all := it.Summary + "\n" + strings.Join(it.Evidence, "\n") + "\n" + strings.Join(it.Fix, "\n")
			for _, w := range tc.want {
				if !strings.Contains(all, w) {
					t.Errorf("no %q in\n%s", w, all)
				}
			}
		})
	}
}

func TestMajorMinor(t *testing.T) {
	for v, want := range map[string][2]int{"20.10.24+dfsg1": {20, 10}, "v1.6.20": {1, 6}, "1.6.20~ds1": {1, 6}, "2.0.0-rc.1": {2, 0}, "23.0": {23, 0}} {
		ma, mi, ok := majorMinor(v)
		if !ok || ma != want[0] || mi != want[1] {
			t.Errorf("%s: %d.%d %v", v, ma, mi, ok)
		}
	}
	for _, v := range []string{"", "dev", "x.y"} {
		if _, _, ok := majorMinor(v); ok {
			t.Errorf("%q parsed", v)
		}
	}
}
