// Command podbus runs the podbus services: all of them in one process (`podbus up`) or one per process.
// main only parses flags (and PODBUS_* environment variables) and signals; the work is in the packages.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	_ "net/http/pprof" // served only when PODBUS_PPROF names an address
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"

	"github.com/podbus/podbus/internal/cli"
	"github.com/podbus/podbus/internal/health"
)

type command struct {
	name    string
	summary string
	run     func(ctx context.Context, args []string) error
}

var commands = []command{
	{"up", "everything in one process: embedded NATS, the services, simulated nodes, the API", runUp},
	{"down", "tear down what up leaves: the real node's pods, their networks and namespaces, then the data dir", runDown},
	{"nats", "an embedded nats-server with JetStream (standalone or a cluster member)", runNATS},
	{"admission", "the Kubernetes API front door", runAdmission},
	{"store", "the store: the only writer of new pods", runStore},
	{"scheduler", "a scheduler replica (run as many as you like)", runScheduler},
	{"binder", "the binder: commits scheduling decisions with compare-and-set", runBinder},
	{"status", "the status service: pod and node status, events, node monitor", runStatus},
	{"namespaces", "the namespace controller: empties and removes deleted namespaces", runNamespaces},
	{"workloads", "the ReplicaSet and Deployment controllers: keep workloads' pods at their count, roll Deployments", runWorkloads},
	{"nodelifecycle", "the node lifecycle controller: taints nodes that are not Ready, evicts pods that do not tolerate it", runNodeLifecycle},
	{"controllers", "the DaemonSet, disruption (PodDisruptionBudget) and garbage-collector controllers", runControllers},
	{"agent", "a node agent (kubelet)", runAgent},
	{"images", "build the built-in OCI images (demo-web, busybox) as an OCI layout: images build --out DIR", runImages},
	{"registry", "an OCI registry on loopback serving the built-in images", runRegistry},
	{"health", "probe a health URL, exit 0 when it answers 200 (container healthchecks)", runHealth},
	{"loadtest", "submit pods and measure the pipeline", runLoadtest},
	{"natsauth", "NATS credentials, certificates and provisioning for a NATS cluster with authorization (init, provision)", runNATSAuth},
	{"audit", "read the audit log: replay, timeline, verify, check, what-if", runAudit},
	{"auditseal", "the audit sealer: signs a hash chain over the audit log (one replica)", runAuditSeal},
	{"chaos", "the deployment as processes under seeded faults, then the history checker (testing)", runChaos},
	{"cluster", "a one-screen summary read over NATS: nodes, pods by phase, consumer lag, parked messages, schedulers", runCluster},
	{"version", "print the module version, the commit and its date, and the Go version", runVersion},
}

// buildVersion is set by the Makefile (-ldflags -X main.buildVersion=…) to `git describe`.
var buildVersion string

// version is the version the binary was built as: the Makefile's `git describe` or else the module's
// version, then the commit and commit date Go recorded, when it did.
func version() string {
	v := "podbus " + buildVersion
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return v
	}
	if buildVersion == "" {
		v = "podbus " + bi.Main.Version
	}
	settings := map[string]string{}
	for _, s := range bi.Settings {
		settings[s.Key] = s.Value
	}
	v += "\n  module " + bi.Main.Path
	if rev := settings["vcs.revision"]; rev != "" {
		v += "\n  commit " + rev
		if settings["vcs.modified"] == "true" {
			v += " (modified)"
		}
	}
	if t := settings["vcs.time"]; t != "" {
		v += "\n  date   " + t + " (the commit's)"
	}
	return v + "\n  go     " + bi.GoVersion
}

func runVersion(_ context.Context, args []string) error {
	if err := parse(flag.NewFlagSet("version", flag.ExitOnError), args); err != nil {
		return err
	}
	fmt.Println(version())
	return nil
}

func usage(w io.Writer) {
	fmt.Fprintf(w, "usage: podbus <command> [flags]\n\ncommands:\n")
	for _, c := range commands {
		fmt.Fprintf(w, "  %-10s %s\n", c.name, c.summary)
	}
	fmt.Fprintf(w, "\n`podbus <command> -h` shows a command's examples and flags. Every flag can also be set as PODBUS_<FLAG>\n(e.g. PODBUS_NATS=nats://n1:4222); a flag on the command line wins.\n\n"+
		"Every command takes --log-format text|json (PODBUS_LOG_FORMAT; default text) and logs at the level of\n"+
		"PODBUS_LOG (debug, info, warn, error; default info) on standard error.\n")
}

func main() {
	if len(os.Args) < 2 {
		usage(os.Stderr)
		os.Exit(2)
	}
	switch os.Args[1] {
	case "help", "-h", "-help", "--help":
		usage(os.Stdout)
		return
	}
	args, format, err := logFormat(os.Args[2:], os.Getenv("PODBUS_LOG_FORMAT"))
	if err != nil {
		fmt.Fprintf(os.Stderr, "podbus: %v\n", err)
		os.Exit(2)
	}
	slog.SetDefault(newLogger(os.Stderr, format, logLevel()))
	// Every command starts with the default limit; those with --memory-limit apply theirs once parsed.
	if err := applyMemoryLimit("auto"); err != nil {
		fmt.Fprintf(os.Stderr, "podbus: %v\n", err)
		os.Exit(1)
	}
	if addr := os.Getenv("PODBUS_PPROF"); addr != "" {
		go func() { _ = http.ListenAndServe(addr, health.DebugHandler()) }()
	}
	for _, c := range commands {
		if c.name != os.Args[1] {
			continue
		}
		if cli.Help(args) {
			if commandHelp(os.Stdout, c, args) {
				return
			}
		}
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		err := c.run(ctx, args)
		stop()
		if errors.Is(err, flag.ErrHelp) {
			return
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "podbus %s: %v\n", c.name, err)
			os.Exit(1)
		}
		return
	}
	fmt.Fprintf(os.Stderr, "podbus: unknown command %q\n\n", os.Args[1])
	usage(os.Stderr)
	os.Exit(2)
}

func logLevel() slog.Level {
	switch strings.ToLower(os.Getenv("PODBUS_LOG")) {
	case "debug":
		return slog.LevelDebug
	case "warn":
		return slog.LevelWarn
	case "error":
		return slog.LevelError
	}
	return slog.LevelInfo
}

// parse parses args, then fills every flag not given on the command line from PODBUS_<NAME>.
func parse(fs *flag.FlagSet, args []string) error { return cli.Parse(fs, args) }

// errLogFormat is returned for a --log-format other than text or json.
var errLogFormat = errors.New("--log-format must be text or json")

// logFormat takes --log-format (or -log-format, with "=" or as the next argument) out of args, wherever
// it is: every command accepts it, whatever its own flag set. env is the format when args have none.
func logFormat(args []string, env string) ([]string, string, error) {
	format := env
	out := make([]string, 0, len(args))
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			out = append(out, args[i:]...)
			break
		}
		name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !strings.HasPrefix(a, "-") || name != "log-format" {
			out = append(out, a)
			continue
		}
		if !hasValue {
			if i+1 == len(args) {
				return nil, "", errLogFormat
			}
			i++
			value = args[i]
		}
		format = value
	}
	switch format {
	case "", "text", "json":
		return out, format, nil
	}
	return nil, "", fmt.Errorf("%w, not %q", errLogFormat, format)
}

// newLogger is slog's text or JSON handler on w.
func newLogger(w io.Writer, format string, level slog.Level) *slog.Logger {
	opts := &slog.HandlerOptions{Level: level}
	if format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}
