package recipes

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
)

// A base image the lock cannot resolve is named once, with its role: the
// registry's error already quotes it (the line read "base image REF:
// image "REF": ..."); an error that does not is given the reference.
func TestLockNamesAnUnresolvableBaseImageOnce(t *testing.T) {
	r, err := Parse("kiln.yaml", []byte("name: a\ncuda: '12.4'\nos: ubuntu22.04\n"))
	if err != nil {
		t.Fatal(err)
	}
	p, err := Resolve(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	for _, naming := range []bool{true, false} {
		_, err = NewLock(context.Background(), r, p, LockOptions{Digests: DigestResolverFunc(func(_ context.Context, ref string) (string, map[string]string, error) {
			if naming {
				return "", nil, fmt.Errorf("image %q: no host named index.docker.io", ref)
			}
			return "", nil, errors.New("no host named index.docker.io")
		})})
		ref := p.BaseImages.Devel
		if err == nil || strings.Count(err.Error(), ref) != 1 || !strings.Contains(err.Error(), "the devel base image") {
			t.Errorf("error %q: want the devel base image %s named once", err, ref)
		}
	}
}
