package wheelkey

import (
	"reflect"
	"strings"
	"testing"
)

func testKey() Key {
	return Key{
		Package: "flash-attn", Version: "2.7.4.post1",
		Source: "sha256:" + strings.Repeat("ab", 32),
		Torch:  "2.6.0", TorchCUDA: "cu124", CUDA: "12.4.1",
		Python: "3.12", PythonABI: "cp312", CXX11ABI: "1",
		Platform: "linux/amd64", Archs: []string{"90", "80"},
		Builder: "docker.io/nvidia/cuda:12.4.1-devel-ubuntu22.04",
		Flags:   []string{"LDFLAGS=-Wl,--strip-all", "FLASH_ATTENTION_FORCE_BUILD=TRUE"},
	}
}

// Every field of the key is part of what names the wheel: changing any
// one gives another digest and tag.
func TestKeyEachFieldChangesIt(t *testing.T) {
	base := testKey()
	v := reflect.ValueOf(&base).Elem()
	for i := 0; i < v.NumField(); i++ {
		k := testKey()
		f := reflect.ValueOf(&k).Elem().Field(i)
		name := v.Type().Field(i).Name
		switch f.Kind() {
		case reflect.String:
			f.SetString(f.String() + "x")
		case reflect.Slice:
			f.Set(reflect.Append(f, reflect.ValueOf("120")))
		default:
			t.Fatalf("field %s: kind %s not covered", name, f.Kind())
		}
		if k.Digest() == base.Digest() || k.Tag() == base.Tag() {
			t.Errorf("changing %s leaves the key %s", name, base.Digest())
		}
		if d := Diff(base, k); len(d) != 1 {
			t.Errorf("changing %s: Diff names %v", name, d)
		}
	}
}

// What does not change the bytes does not change the key: list order,
// the spelling of the package name.
func TestKeyNormalizes(t *testing.T) {
	a, b := testKey(), testKey()
	b.Package = "Flash_Attn"
	b.Archs = []string{"80", "90", "80"}
	b.Flags = []string{b.Flags[1], b.Flags[0]}
	if a.Digest() != b.Digest() {
		t.Errorf("%s vs %s", a.JSON(), b.JSON())
	}
	if !strings.HasPrefix(a.Tag(), "flash-attn-") || len(a.Tag()) > 128 {
		t.Errorf("tag %q", a.Tag())
	}
	if got := sortedArchs([]string{"120", "90", "100", "80"}); strings.Join(got, ";") != "80;90;100;120" {
		t.Errorf("archs sorted %v", got)
	}
}

func TestKeyCheck(t *testing.T) {
	k := testKey()
	k.Source = ""
	if err := k.Check(); err == nil || !strings.Contains(err.Error(), "source") {
		t.Errorf("a key without its source digest: %v", err)
	}
}
