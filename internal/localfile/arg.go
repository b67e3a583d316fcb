package localfile

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
)

// ArgFile is a command-line argument that named a local JSON file (a kiln
// lock, a weights volume manifest), read once: its bytes, and the two
// top-level fields that say which it is.
type ArgFile struct {
	Path  string
	Bytes []byte
	// MediaType is a weights volume manifest's mediaType ("" without).
	MediaType string
	// LockVersion is a kiln lock's lock_version (0 without).
	LockVersion int
}

// referencePrefixes are the transports that always name an image, never a
// file: oci:DIR and docker-archive:FILE name files of their own.
var referencePrefixes = []string{"oci:", "docker-archive:", "docker://", "docker-daemon:"}

// ReadArg is the one rule by which kiln's commands tell a file argument
// from a reference (kiln warm, kiln weights pull, kiln host check
// --image). An argument ending in .json names a file (a missing one is an
// error that names it, not a reference nobody has); a transport prefix
// (oci:, docker-archive:, docker://, docker-daemon:) names a reference;
// any other argument names a file when it is a regular file of at most
// max bytes whose JSON has a mediaType or a lock_version (a program named
// like the image, beside it, stays a reference). A file is read once: what
// it is comes from those bytes (MediaType, LockVersion), and the caller
// decodes the same bytes. (nil, nil): arg is a reference.
func ReadArg(arg string, max int64) (*ArgFile, error) {
	for _, p := range referencePrefixes {
		if strings.HasPrefix(arg, p) {
			return nil, nil
		}
	}
	named := strings.HasSuffix(arg, ".json")
	if !named {
		fi, err := os.Stat(arg)
		if err != nil || !fi.Mode().IsRegular() || fi.Size() > max {
			return nil, nil
		}
	}
	b, err := ReadFile(arg, "file", max)
	if err != nil {
		if !named && (errors.Is(err, fs.ErrNotExist) || errors.Is(err, ErrNotRegular) || errors.Is(err, ErrTooLarge)) {
			return nil, nil // gone or changed since the stat: a reference
		}
		return nil, err
	}
	var probe struct {
		MediaType   string `json:"mediaType"`
		LockVersion int    `json:"lock_version"`
	}
	if err := json.Unmarshal(b, &probe); err != nil || probe.MediaType == "" && probe.LockVersion == 0 {
		if !named {
			return nil, nil
		}
		if err == nil {
			err = errors.New("no mediaType or lock_version")
		}
		return nil, fmt.Errorf("%s: neither a kiln lock nor a weights volume manifest (%v)", arg, err)
	}
	return &ArgFile{Path: arg, Bytes: b, MediaType: probe.MediaType, LockVersion: probe.LockVersion}, nil
}
