// Package embeddata loads the JSON data sets compiled into kiln (cuda's and
// recipes') the one way: each file decoded into its part of the set, and
// the set loaded once, on first use.
package embeddata

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"sync"
)

// File is one JSON file of a data set and the value it decodes into.
type File struct {
	Name string
	V    any
}

// Decode decodes each file, read from data/ in fsys, into its value. A
// file that does not decode is named after pkg, the package whose data it
// is ("cuda: embedded gpus.json: ...").
func Decode(fsys fs.ReadFileFS, pkg string, files ...File) error {
	for _, f := range files {
		b, err := fsys.ReadFile("data/" + f.Name)
		if err != nil {
			return err
		}
		if err := json.Unmarshal(b, f.V); err != nil {
			return fmt.Errorf("%s: embedded %s: %w", pkg, f.Name, err)
		}
	}
	return nil
}

// Once makes load's result computed on the first call and kept: get
// returns it, must returns it or panics on its error (the data is compiled
// in, so a set that does not load is a bug of the build, which the
// package's tests catch).
func Once[T any](load func() (T, error)) (get func() (T, error), must func() T) {
	get = sync.OnceValues(load)
	return get, func() T {
		v, err := get()
		if err != nil {
			panic(err)
		}
		return v
	}
}
