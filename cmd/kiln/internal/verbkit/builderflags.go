package verbkit

import (
	"github.com/spf13/cobra"

	"github.com/kiln-build/kiln/builder"
)

// BuilderFlags are --builder and its TLS options, on every verb that runs
// BuildKit (build, slim --probe).
type BuilderFlags struct {
	Builder       string
	TLSCACert     string
	TLSCert       string
	TLSKey        string
	TLSServerName string
}

// Register adds --builder, --tlscacert, --tlscert, --tlskey and
// --tlsservername to cmd.
func (f *BuilderFlags) Register(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&f.Builder, "builder", "", "BuildKit address: unix://PATH, tcp://HOST:PORT, docker-container://NAME, kube-pod://POD (default $BUILDKIT_HOST, then the standard sockets)")
	fl.StringVar(&f.TLSCACert, "tlscacert", "", "CA certificate for a tcp:// builder")
	fl.StringVar(&f.TLSCert, "tlscert", "", "client certificate for a tcp:// builder")
	fl.StringVar(&f.TLSKey, "tlskey", "", "client key for a tcp:// builder")
	fl.StringVar(&f.TLSServerName, "tlsservername", "", "server name the builder's certificate is checked against")
}

// TLS is the flags' TLS configuration.
func (f *BuilderFlags) TLS() builder.TLS {
	return builder.TLS{ServerName: f.TLSServerName, CACert: f.TLSCACert, Cert: f.TLSCert, Key: f.TLSKey}
}
