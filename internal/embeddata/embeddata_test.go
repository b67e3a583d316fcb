package embeddata

import (
	"errors"
	"strings"
	"testing"
	"testing/fstest"
)

func TestDecode(t *testing.T) {
	fsys := fstest.MapFS{
		"data/a.json":   {Data: []byte(`{"x": 1}`)},
		"data/bad.json": {Data: []byte(`{`)},
	}
	var a struct{ X int }
	if err := Decode(fsys, "pkg", File{"a.json", &a}); err != nil || a.X != 1 {
		t.Fatalf("a.json: %v, %+v", err, a)
	}
	if err := Decode(fsys, "pkg", File{"bad.json", &a}); err == nil || !strings.HasPrefix(err.Error(), "pkg: embedded bad.json: ") {
		t.Errorf("bad.json: %v", err)
	}
	if err := Decode(fsys, "pkg", File{"missing.json", &a}); err == nil {
		t.Error("missing.json: no error")
	}
}

func TestOnce(t *testing.T) {
	n := 0
	get, must := Once(func() (int, error) { n++; return 7, nil })
	if v, err := get(); v != 7 || err != nil || must() != 7 || n != 1 {
		t.Errorf("get %d %v, must, calls %d", v, err, n)
	}
	_, must = Once(func() (int, error) { return 0, errors.New("no data") })
	defer func() {
		if recover() == nil {
			t.Error("must did not panic")
		}
	}()
	must()
}
