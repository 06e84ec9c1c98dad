package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/internal/natsauth"
)

// natsFlags are the NATS credential and CA flags of every command that connects to NATS.
type natsFlags struct {
	creds, ca string
}

func (n *natsFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&n.creds, "nats-creds", "", "NATS credential file of this component's role (podbus up writes them in <data>/"+
		"nats-creds, podbus natsauth init in its --dir); empty: connect without one")
	fs.StringVar(&n.ca, "nats-ca", "", "CA certificate (PEM) the NATS servers' TLS certificates chain to; empty: the system's")
}

// options are the nats.go options of the flags.
func (n *natsFlags) options() ([]nats.Option, error) {
	opts, _, err := natsauth.ClientOptions(n.creds, n.ca)
	return opts, err
}

// restricted reports whether the credential is a service's, which may not provision streams.
func (n *natsFlags) restricted() bool {
	if n.creds == "" {
		return false
	}
	c, err := natsauth.ReadFile(n.creds)
	return err != nil || c.Role != natsauth.RoleAdmin
}

const natsauthUsage = `usage: podbus natsauth <init|provision> [flags]

  init       make (first run) or reuse the NATS CA, the NATS servers' certificate, a credential per role and
             the servers' authorization file in --dir; copy each role's credential into --copy-to/<role>
             when that directory exists (one volume per service in docker-compose)
  provision  create or update every stream and bucket with the admin credential
`

func runNATSAuth(ctx context.Context, args []string) error {
	if len(args) == 0 {
		fmt.Fprint(os.Stderr, natsauthUsage)
		os.Exit(2)
	}
	verb, args := args[0], args[1:]
	fs := flag.NewFlagSet("natsauth "+verb, flag.ExitOnError)
	switch verb {
	case "init":
		dir := fs.String("dir", ".podbus/natsauth", "where the CA (pki/), the credentials (creds/) and nats-auth.conf are kept")
		hosts := fs.String("hosts", "", "host names of the NATS servers for their certificate, comma separated")
		agents := fs.String("agents", "", "node names to make agent credentials for, comma separated")
		pools := fs.String("pools", "", "agent host names to make simulated-node pool credentials for, comma separated")
		copyTo := fs.String("copy-to", "", "for each role (and \"nats\", the servers' files) whose directory exists here, copy its files into it")
		if err := parse(fs, args); err != nil {
			return err
		}
		roles := append(append([]string{}, natsauth.ServiceRoles...), natsauth.RoleSimAgents)
		for _, n := range splitList(*agents) {
			roles = append(roles, natsauth.AgentRole(n))
		}
		for _, h := range splitList(*pools) {
			roles = append(roles, natsauth.PoolRole(h))
		}
		out, err := natsauth.Init(*dir, splitList(*hosts), roles)
		if err != nil {
			return err
		}
		fmt.Printf("NATS CA %s, server certificate %s, authorization %s, credentials in %s\n", out.CA, out.Cert, out.Conf, out.CredsDir)
		if *copyTo != "" {
			copied, err := out.CopyTo(*copyTo)
			if err != nil {
				return err
			}
			fmt.Printf("copied into %s: %s\n", *copyTo, strings.Join(copied, ", "))
		}
		return nil
	case "provision":
		var c common
		c.register(fs, "natsauth")
		if err := parse(fs, args); err != nil {
			return err
		}
		opts, err := c.natsFlags.options()
		if err != nil {
			return err
		}
		conn, err := bus.Connect(ctx, c.nats, "podbus-provision", opts...)
		if err != nil {
			return err
		}
		defer conn.Close()
		o := c.busOptions()
		o.Provisioned = false
		if err := bus.Provision(ctx, conn.JS, o); err != nil {
			return err
		}
		fmt.Println("streams and buckets provisioned")
		return nil
	default:
		fmt.Fprint(os.Stderr, natsauthUsage)
		os.Exit(2)
	}
	return nil
}
