package verbkit

import (
	"io"
	"os"

	"github.com/spf13/pflag"

	"github.com/kiln-build/kiln/cmd/kiln/internal/cmdutil"
	"github.com/kiln-build/kiln/registry"
)

// MirrorFiles are the host files kiln reads registry mirrors from when
// neither --mirror nor $KILN_MIRROR names a registry's (Docker's
// daemon.json, containerd's hosts.toml directories); tests point them at
// a temporary directory.
var MirrorFiles = registry.DefaultMirrorFiles

// mirrorUsage is --mirror's help, the same on every verb.
const mirrorUsage = "registry mirror, read before the registry (repeatable): REGISTRY=ENDPOINT, or ENDPOINT alone for Docker Hub; ENDPOINT is [http://]host[:port][/path] (default $" + registry.MirrorEnv + ", comma-separated, then /etc/docker/daemon.json registry-mirrors and /etc/containerd/certs.d/*/hosts.toml; \"\" turns mirrors off)"

// MirrorFlag adds --mirror to fs, into p.
func MirrorFlag(fs *pflag.FlagSet, p *[]string) {
	fs.StringArrayVar(p, "mirror", nil, mirrorUsage)
}

// MirrorOptions are the registry options of the mirror settings: flags
// (--mirror's values) over $KILN_MIRROR over the host's files
// (MirrorFiles), and the line each read through or around a mirror
// prints on note ("kiln: REF: read through mirror M (SOURCE)"; nil: none).
// A --mirror that does not parse is a usage error.
func MirrorOptions(flags []string, note io.Writer) ([]registry.Option, error) {
	for _, f := range flags {
		if f == "" {
			continue
		}
		if _, err := registry.ParseMirrors(f, "--mirror"); err != nil {
			return nil, cmdutil.UsageErr("%v", err)
		}
	}
	ms, err := registry.LoadMirrors(flags, os.Getenv(registry.MirrorEnv), MirrorFiles)
	if err != nil {
		return nil, err
	}
	if len(ms) == 0 {
		return nil, nil
	}
	opts := []registry.Option{registry.WithMirrors(ms...)}
	if note != nil {
		opts = append(opts, registry.WithMirrorNote(func(line string) { cmdutil.Notef(note, "%s", line) }))
	}
	return opts, nil
}
