//go:build !linux

package slim

import (
	"context"
	"errors"
	"io"
)

// RecordOpens needs fanotify: Linux only (see record_linux.go).
func RecordOpens(ctx context.Context, out, user string, argv []string, stdin io.Reader, stdout, stderr io.Writer) (int, error) {
	return 0, errors.New("record: fanotify is Linux only")
}
