package convert

import (
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
)

func mutateConfig(img v1.Image, cf *v1.ConfigFile) (v1.Image, error) {
	return mutate.ConfigFile(img, cf)
}
