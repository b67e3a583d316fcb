package warmcmd

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/kiln-build/kiln/cmd/kiln/internal/cmdutil"
	"github.com/kiln-build/kiln/cmd/kiln/internal/verbkit"
	"github.com/kiln-build/kiln/internal/bytesize"
	"github.com/kiln-build/kiln/internal/localfile"
	"github.com/kiln-build/kiln/registry"
	"github.com/kiln-build/kiln/warm/fleet"
)

// The fleet flags are kiln warm's own (WarmOptions.Fleet): withFleet adds
// them and the status subcommand, runFleetIfAsked takes the run when
// --hosts or --emit is given.

// FleetOptions are the inputs of kiln warm --hosts and kiln warm status.
type FleetOptions struct {
	IO *cmdutil.IO
	// Exec runs kiln in-process (the Factory's): status --node's dry run.
	Exec       func(ctx context.Context, args []string, ios *cmdutil.IO) int
	Refs       []string
	HostsFile  string
	Parallel   int
	KnownHosts string
	Insecure   bool // --insecure-ignore-host-key
	KilnBinary string
	Target     string
	Namespace  string
	DryRun     bool // status
	JSON       bool
	Progress   string
	// WarmArgs are the other kiln warm flags the user set, passed on to
	// every host's kiln warm.
	WarmArgs         []string
	Platform         string
	InsecureRegistry []string
	// Node is status --node NAME (this host's state, one JSON line);
	// FromLogs is status --from-logs FILE|- (the nodes' lines read back).
	Node, FromLogs string
}

// EmitOptions are the inputs of kiln warm --emit.
type EmitOptions struct {
	IO *cmdutil.IO
	fleet.K8sOptions
	Emit         string
	NodeSelector []string
	Target       string
}

// fleetFlags are the flags withFleet adds to kiln warm.
type fleetFlags struct {
	hosts, knownHosts, kilnBinary          string
	parallel                               int
	insecureHostKey                        bool
	emit, kilnImage, k8sNamespace, objName string
	containerdSocket                       string
	nodeSelector                           []string
	completions                            int
	perZone                                int
	zones                                  []string
	status                                 bool
}

// fleetOnly names the flags that belong to fleet mode, or that fleet sets
// itself on each host, and are therefore not passed through.
var fleetOnly = map[string]bool{
	"hosts": true, "parallel": true, "known-hosts": true, "insecure-ignore-host-key": true, "kiln-binary": true,
	"emit": true, "node-selector": true, "kiln-image": true, "k8s-namespace": true, "name": true, "completions": true,
	"per-zone": true, "zones": true, "status": true, "containerd-socket": true, "target": true, "no-space-check": true, "namespace": true, "json": true, "progress": true, "dry-run": true, "help": true,
}

func (f *fleetFlags) sshFlags(fs *pflag.FlagSet) {
	fs.StringVar(&f.hosts, "hosts", "", "warm every host in this YAML file over SSH (docs/fleet.md)")
	fs.IntVar(&f.parallel, "parallel", 8, "with --hosts: hosts worked on at once")
	fs.StringVar(&f.knownHosts, "known-hosts", "", "with --hosts: known_hosts file host keys are checked against (default ~/.ssh/known_hosts)")
	fs.BoolVar(&f.insecureHostKey, "insecure-ignore-host-key", false, "with --hosts: accept any host key (throwaway hosts only)")
	fs.StringVar(&f.kilnBinary, "kiln-binary", "", "with --hosts: kiln binary to copy to hosts (default this one; give a linux/arm64 build for arm64 hosts)")
}

func withFleet(cmd *cobra.Command, opts *WarmOptions, fac *verbkit.Factory) {
	f := &opts.Fleet
	fs := cmd.Flags()
	f.sshFlags(fs)
	fs.StringVar(&f.emit, "emit", "", "print Kubernetes YAML instead of warming: k8s or kubernetes (a DaemonSet), or k8s-job (a Job)")
	fs.StringSliceVar(&f.nodeSelector, "node-selector", nil, "with --emit: node labels k=v the pods run on (repeatable)")
	fs.StringVar(&f.kilnImage, "kiln-image", "ghcr.io/kiln-build/kiln:"+fac.VersionTag(), "with --emit: image that runs kiln in the pods")
	fs.StringVar(&f.k8sNamespace, "k8s-namespace", "", "with --emit: Kubernetes namespace of the object (default: kubectl's)")
	fs.StringVar(&f.objName, "name", "kiln-warm", "with --emit: name of the DaemonSet or Job")
	fs.StringVar(&f.containerdSocket, "containerd-socket", "/run/containerd/containerd.sock", "with --emit: the nodes' containerd socket (k3s: /run/k3s/containerd/containerd.sock)")
	fs.IntVar(&f.completions, "completions", 1, "with --emit k8s-job: pods, each on a different node")
	fs.IntVar(&f.perZone, "per-zone", 0, "with --emit: warm only N nodes in each of --zones (a Job per zone; the rest pull through a Spegel/Dragonfly mirror, docs/fleet.md)")
	fs.StringSliceVar(&f.zones, "zones", nil, "with --per-zone: the zones (values of the nodes' topology.kubernetes.io/zone label)")
	fs.BoolVar(&f.status, "status", false, "with --emit: pods that only report each node's warm state (kiln warm status --node), for kiln warm status --from-logs")
	cmd.Example = strings.TrimRight(cmd.Example, "\n") + `
  kiln warm --hosts gpus.yaml 10.0.0.5:5000/acme/serve:1.2 --target containerd --namespace k8s.io
  kiln warm status --hosts gpus.yaml 10.0.0.5:5000/acme/serve:1.2
  kiln warm --emit k8s --node-selector nvidia.com/gpu.present=true ghcr.io/acme/serve:1.2 | kubectl apply -f -
  kiln warm --emit k8s --per-zone 1 --zones us-east-1a,us-east-1b ghcr.io/acme/serve:1.2 | kubectl apply -f -`
	cmd.AddCommand(NewCmdWarmStatus(fac, nil))
}

// runFleetIfAsked owns kiln warm runs with --hosts or --emit.
func runFleetIfAsked(ctx context.Context, cmd *cobra.Command, opts *WarmOptions) (bool, error) {
	f := &opts.Fleet
	switch {
	case f.hosts != "" && f.emit != "":
		return true, cmdutil.UsageErr("--hosts and --emit: choose one")
	case f.emit != "":
		return true, runEmit(emitOptions(cmd, opts.IO, f, opts.Args))
	case f.hosts != "":
		return true, runFleet(ctx, fleetOptions(cmd, opts.IO, f, opts.Args))
	}
	return false, nil
}

func flagString(fs *pflag.FlagSet, name string) string {
	if f := fs.Lookup(name); f != nil {
		return f.Value.String()
	}
	return ""
}

// changedString is a flag's value when the user set it: --emit's default
// containerd namespace is the kubelet's (k8s.io), not warm's.
func changedString(fs *pflag.FlagSet, name string) string {
	if fs.Changed(name) {
		return flagString(fs, name)
	}
	return ""
}

func flagBool(fs *pflag.FlagSet, name string) bool {
	v, _ := strconv.ParseBool(flagString(fs, name))
	return v
}

func flagSlice(fs *pflag.FlagSet, name string) []string {
	if f := fs.Lookup(name); f != nil {
		if sv, ok := f.Value.(pflag.SliceValue); ok {
			return sv.GetSlice()
		}
	}
	return nil
}

// passThrough turns the warm flags the user set into arguments for the
// hosts' kiln warm, leaving out fleet's own and those named in skip.
func passThrough(fs *pflag.FlagSet, skip ...string) []string {
	var args []string
	fs.Visit(func(f *pflag.Flag) {
		if fleetOnly[f.Name] || slices.Contains(skip, f.Name) {
			return
		}
		if sv, ok := f.Value.(pflag.SliceValue); ok {
			for _, v := range sv.GetSlice() {
				args = append(args, "--"+f.Name+"="+v)
			}
			return
		}
		args = append(args, "--"+f.Name+"="+f.Value.String())
	})
	return args
}

func fleetOptions(c *cobra.Command, ios *cmdutil.IO, f *fleetFlags, args []string) *FleetOptions {
	fs := c.Flags()
	return &FleetOptions{
		IO: ios, Refs: args, HostsFile: f.hosts, Parallel: f.parallel, KnownHosts: f.knownHosts,
		Insecure: f.insecureHostKey, KilnBinary: f.kilnBinary,
		Target: flagString(fs, "target"), Namespace: flagString(fs, "namespace"),
		DryRun: flagBool(fs, "dry-run"), JSON: flagBool(fs, "json"), Progress: flagString(fs, "progress"),
		WarmArgs: passThrough(fs), Platform: flagString(fs, "platform"), InsecureRegistry: flagSlice(fs, "insecure-registry"),
	}
}

func emitOptions(c *cobra.Command, ios *cmdutil.IO, f *fleetFlags, args []string) *EmitOptions {
	fs := c.Flags()
	eo := &EmitOptions{
		IO: ios, Emit: f.emit, NodeSelector: f.nodeSelector, Target: flagString(fs, "target"),
		K8sOptions: fleet.K8sOptions{
			Name: f.objName, Namespace: f.k8sNamespace, Refs: args, KilnImage: f.kilnImage,
			ContainerdSocket: f.containerdSocket, ContainerdNamespace: changedString(fs, "namespace"),
			// --weights-into becomes a hostPath mount and its argument
			// (BuildK8s), not a bare flag pointing into the pod.
			WarmArgs: passThrough(fs, "weights-into"), Completions: f.completions,
			WeightsDir: changedString(fs, "weights-into"), PerZone: f.perZone, Zones: f.zones,
			Status: f.status,
		},
	}
	if f.status {
		if !fs.Changed("name") {
			eo.Name = "" // BuildK8s's status default, kiln-warm-status
		}
		// kiln warm status takes only these of warm's flags.
		eo.WarmArgs = nil
		for _, n := range statusFlags {
			for _, v := range flagSlice(fs, n) {
				if fs.Changed(n) {
					eo.WarmArgs = append(eo.WarmArgs, "--"+n+"="+v)
				}
			}
			if n == "platform" && fs.Changed(n) {
				eo.WarmArgs = append(eo.WarmArgs, "--platform="+flagString(fs, n))
			}
		}
	}
	return eo
}

// statusFlags are the kiln warm flags kiln warm status passes on to each
// host's or node's dry run.
var statusFlags = []string{"platform", "insecure-registry"}

// NewCmdWarmStatus is kiln warm status. runF, when not nil, gets the
// parsed options instead of the command running (tests stop there).
func NewCmdWarmStatus(fac *verbkit.Factory, runF func(*FleetOptions) error) *cobra.Command {
	f := &fleetFlags{}
	opts := &FleetOptions{IO: fac.IO, Exec: fac.Exec, DryRun: true}
	cmd := &cobra.Command{
		Use:   "status --hosts FILE REF... | --node NAME REF... | --from-logs FILE|-",
		Short: "Ask each host whether it is warm, and how many bytes it is missing",
		Long: `Runs kiln warm --dry-run on every host of the hosts file (copying kiln
there when it is missing) and prints each host's state: warm (every blob of
the warm set present), cold (bytes missing) or failed.

In a cluster (kiln warm --emit k8s --status): --node NAME runs the dry run
here, against this node's --target, and prints one JSON line (the row
--hosts --json prints for a host, named NAME); it exits 0 warm or cold, 1
failed. --from-logs FILE|- reads those lines as kubectl logs prints them
(with or without --prefix) and prints the table for every node.

Exit codes: 0 every host warm, 5 some host cold, 1 some host failed.`,
		Example: `  kiln warm status --hosts gpus.yaml 10.0.0.5:5000/acme/serve:1.2 --target containerd --namespace k8s.io
  kubectl logs -l app.kubernetes.io/instance=kiln-warm-status -c status --prefix --tail=-1 | kiln warm status --from-logs -`,
		RunE: func(c *cobra.Command, args []string) error {
			opts.Refs, opts.HostsFile, opts.Parallel = args, f.hosts, f.parallel
			opts.KnownHosts, opts.Insecure, opts.KilnBinary = f.knownHosts, f.insecureHostKey, f.kilnBinary
			modes := 0
			for _, m := range []string{opts.HostsFile, opts.Node, opts.FromLogs} {
				if m != "" {
					modes++
				}
			}
			if modes != 1 {
				return cmdutil.UsageErr("kiln warm status needs --hosts FILE, or --node NAME, or --from-logs FILE (one of them)")
			}
			if opts.FromLogs != "" {
				if len(args) > 0 {
					return cmdutil.UsageErr("--from-logs reads the nodes' reports; it takes no image")
				}
				if runF != nil {
					return runF(opts)
				}
				return runStatusFromLogs(opts, opts.FromLogs)
			}
			if len(args) == 0 {
				return cmdutil.UsageErr("name at least one image")
			}
			for _, n := range statusFlags {
				if c.Flags().Changed(n) {
					for _, v := range flagSlice(c.Flags(), n) {
						opts.WarmArgs = append(opts.WarmArgs, "--"+n+"="+v)
					}
					if n == "platform" {
						opts.WarmArgs = append(opts.WarmArgs, "--platform="+opts.Platform)
					}
				}
			}
			if runF != nil {
				return runF(opts)
			}
			if opts.Node != "" {
				return runNodeStatus(c.Context(), opts, opts.Node)
			}
			return runFleet(c.Context(), opts)
		},
	}
	f.sshFlags(cmd.Flags())
	cmd.Flags().StringVar(&opts.Node, "node", "", "report this host's own state as node NAME, one JSON line (the status pods of kiln warm --emit k8s --status)")
	cmd.Flags().StringVar(&opts.FromLogs, "from-logs", "", "gather the --node lines of a cluster's status pods from this file (- for stdin), as kubectl logs prints them")
	cmd.Flags().StringVar(&opts.Target, "target", "", "target on hosts whose entry names none (with --node: this host's)")
	cmd.Flags().StringVar(&opts.Namespace, "namespace", "", "containerd namespace on hosts whose entry names none")
	cmd.Flags().StringVar(&opts.Platform, "platform", "", "platform to check (default: each host's)")
	cmd.Flags().StringSliceVar(&opts.InsecureRegistry, "insecure-registry", nil, "registry host that speaks plain HTTP (repeatable)")
	cmd.Flags().BoolVar(&opts.JSON, "json", false, "print per-host results as JSON")
	cmdutil.SetSchema(cmd, "kiln.warm-fleet/v1")
	cmdutil.ProgressFlag(cmd.Flags(), &opts.Progress)
	return cmd
}

// runNodeStatus is kiln warm status --node: this host's kiln warm
// --dry-run, run in-process, as the one-line row of a fleet table. The
// line is printed whatever the state (a status pod's log is its report);
// only a failed check exits non-zero, so the pod shows it too.
func runNodeStatus(ctx context.Context, opts *FleetOptions, node string) error {
	if opts.Target == "" {
		return cmdutil.UsageErr("--node needs --target (this node's, e.g. containerd:/run/containerd/containerd.sock)")
	}
	args := append([]string{"warm"}, opts.Refs...)
	args = append(args, "--target", opts.Target, "--dry-run", "--json", "--progress", "none")
	if opts.Namespace != "" {
		args = append(args, "--namespace", opts.Namespace)
	}
	args = append(args, opts.WarmArgs...)
	var out, errb bytes.Buffer
	start := time.Now()
	code := opts.Exec(ctx, args, &cmdutil.IO{In: strings.NewReader(""), Out: &out, ErrOut: &errb})
	r := fleet.NodeResult(node, opts.Target, out.Bytes(), code, errb.String())
	r.Seconds = time.Since(start).Seconds()
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	if _, err := opts.IO.Out.Write(append(b, '\n')); err != nil {
		return err
	}
	if r.State == fleet.StateFailed {
		cmdutil.Notef(opts.IO.ErrOut, "%s: %s", node, r.Error)
		return cmdutil.SilentExit(cmdutil.ExitFailure)
	}
	return nil
}

// runStatusFromLogs is kiln warm status --from-logs: the nodes' --node
// lines gathered into the --hosts table (or JSON array), with its exit
// codes.
func runStatusFromLogs(opts *FleetOptions, file string) error {
	in, name := opts.IO.In, "stdin"
	if file != "-" {
		// A regular file only: a FIFO there would block for ever (issue
		// 27); a stream is read from stdin.
		f, err := localfile.Open(file, "logs")
		if errors.Is(err, localfile.ErrNotRegular) {
			err = fmt.Errorf("%w; or pipe the logs in: ... | kiln warm status --from-logs -", err)
		}
		if err != nil {
			return verbkit.DataErrField(opts.IO, opts.JSON, "from-logs", err)
		}
		defer f.Close()
		in, name = f, file
	}
	res, err := fleet.ReadStatusLogs(in, name)
	if err != nil {
		return verbkit.DataErrField(opts.IO, opts.JSON, "from-logs", err)
	}
	return printFleet(opts, res)
}

func runFleet(ctx context.Context, opts *FleetOptions) error {
	if opts.Parallel < 1 {
		return cmdutil.UsageErr("--parallel: must be at least 1")
	}
	if err := cmdutil.CheckProgress(opts.Progress); err != nil {
		return err
	}
	opts.Progress = cmdutil.NormalizeProgress(opts.Progress)
	if len(opts.Refs) == 0 {
		return cmdutil.UsageErr("name at least one image to warm")
	}
	hosts, err := fleet.LoadHosts(opts.HostsFile)
	if err != nil {
		return cmdutil.UsageErr("--hosts: %v", err)
	}
	fo := fleet.Options{
		Refs: opts.Refs, Target: opts.Target, Namespace: opts.Namespace, WarmArgs: opts.WarmArgs,
		DryRun: opts.DryRun, Parallel: opts.Parallel,
		SSH: fleet.SSHConfig{KnownHosts: opts.KnownHosts, InsecureIgnoreHostKey: opts.Insecure},
	}
	needBinary := false
	for _, h := range hosts {
		needBinary = needBinary || h.KilnPath == ""
	}
	if needBinary {
		if fo.Binary, err = fleet.LocalBinary(opts.KilnBinary); err != nil {
			return err
		}
	}
	fo.Registry = []registry.Option{registry.WithInsecureRegistries(opts.InsecureRegistry...)}
	if opts.Progress != "none" {
		var mu sync.Mutex
		fo.Event = func(host, what string) {
			mu.Lock()
			defer mu.Unlock()
			fmt.Fprintf(opts.IO.ErrOut, "%s: %s\n", host, what)
		}
	}
	return printFleet(opts, fleet.Run(ctx, hosts, fo))
}

// printFleet prints the per-host table (or --json array) and exits 0
// every host warm, 5 some cold and none failed, 1 some failed.
func printFleet(opts *FleetOptions, res []fleet.Result) error {
	if opts.JSON {
		// One object (kiln's --json contract): the hosts under "hosts".
		if err := cmdutil.WriteJSON(opts.IO.Out, map[string]any{"schema": "kiln.warm-fleet/v1", "hosts": res}); err != nil {
			return err
		}
	} else {
		writeFleetTable(opts.IO, res)
	}
	code := cmdutil.ExitOK
	for _, r := range res {
		switch r.State {
		case fleet.StateFailed:
			code = cmdutil.ExitFailure
		case fleet.StateCold:
			if code == cmdutil.ExitOK {
				// status (and --dry-run) answer "something missing" with 5,
				// like a single host's kiln warm --dry-run.
				code = cmdutil.ExitNotReady
			}
		}
	}
	if code != cmdutil.ExitOK {
		return cmdutil.SilentExit(code)
	}
	return nil
}

func writeFleetTable(ios *cmdutil.IO, res []fleet.Result) {
	tw := tabwriter.NewWriter(ios.Out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "HOST\tMODE\tSTATE\tMISSING\tFETCHED\tPUSHED\tSECONDS\tERROR")
	counts := map[string]int{}
	for _, r := range res {
		counts[r.State]++
		pushed := "-"
		if r.Mode == fleet.ModePush {
			pushed = bytesize.Format(r.PushedBytes)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%.1f\t%s\n", r.Host, r.Mode, r.State,
			bytesize.Format(r.MissingBytes), bytesize.Format(r.FetchedBytes), pushed, r.Seconds, oneLine(r.Error))
	}
	tw.Flush()
	fmt.Fprintf(ios.Out, "\n%d host(s): %d warm, %d cold, %d failed\n", len(res), counts[fleet.StateWarm], counts[fleet.StateCold], counts[fleet.StateFailed])
}

func oneLine(s string) string {
	s = strings.ReplaceAll(s, "\n", " ")
	if len(s) > 160 {
		s = s[:157] + "..."
	}
	return s
}

func runEmit(opts *EmitOptions) error {
	switch opts.Emit {
	case "k8s", "k8s-daemonset", "kubernetes":
		opts.Kind = fleet.KindDaemonSet
	case "k8s-job":
		opts.Kind = fleet.KindJob
	default:
		return cmdutil.UsageErr("--emit: %q is not k8s or kubernetes (a DaemonSet), or k8s-job", opts.Emit)
	}
	if opts.Target != "" {
		return cmdutil.UsageErr("--emit warms each node's containerd (--containerd-socket); --target does not apply")
	}
	if opts.PerZone < 0 {
		return cmdutil.UsageErr("--per-zone: must be at least 1")
	}
	if opts.PerZone > 0 && opts.Kind == fleet.KindJob && opts.Completions != 1 {
		return cmdutil.UsageErr("--per-zone sets each zone's Job's pod count; --completions does not apply")
	}
	sel, err := fleet.ParseSelector(opts.NodeSelector)
	if err != nil {
		return cmdutil.UsageErr("--node-selector: %v", err)
	}
	opts.K8sOptions.NodeSelector = sel
	b, err := fleet.EmitK8s(opts.K8sOptions)
	if err != nil {
		return cmdutil.UsageErr("--emit: %v", err)
	}
	_, err = opts.IO.Out.Write(b)
	return err
}
