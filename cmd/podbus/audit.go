package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/podbus/podbus/audit"
	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/sched/config"
)

const auditUsage = `usage: podbus audit <verb> [flags]

verbs:
  replay     records in order as a table or JSON lines (--since, --seq, --until, --subject, --follow, --pace, -o json;
             --verify-chain: the whole log, each record checked against its seal first)
  timeline   ns/name (every incarnation, newest first) or --uid: each step, the service, the gaps, a summary
  verify     rebuild pods and nodes from the history alone, compare with the live buckets (exit 1 on any difference);
             --chain [--pubkey FILE]: check the log against the sealer's signed hash chain instead (exit 1 on tampering)
  check      the history checker: lost pods, double binds, overcommit at any revision (--workload, --end, --wait; exit 1 on any violation)
  what-if    re-run recorded scheduling decisions with --profile file.yaml (--since)
`

// errGaveUp is the cause of an audit command's end at its --timeout.
var errGaveUp = errors.New("timed out")

// runAudit parses flags and hands over to package audit.
func runAudit(ctx context.Context, args []string) (err error) {
	if len(args) == 0 {
		fmt.Fprint(os.Stderr, auditUsage)
		os.Exit(2)
	}
	verb, args := args[0], args[1:]
	fs := flag.NewFlagSet("audit "+verb, flag.ExitOnError)
	natsURL := fs.String("nats", "nats://127.0.0.1:4222", "NATS server URL(s)")
	var nf natsFlags
	nf.register(fs)
	stream := fs.String("stream", bus.StreamAudit, "the audit stream (or a copy of it)")
	timeout := fs.Duration("timeout", 0, "give up after this long, connecting included (0: never); with --follow, stop following")
	// The timeout is known once a verb has parsed its flags, which is before it connects: connect
	// starts it, and it ends ctx with errGaveUp as its cause.
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	defer func() {
		if err != nil && errors.Is(context.Cause(ctx), errGaveUp) {
			err = fmt.Errorf("gave up after %s (--timeout): %w", *timeout, err)
		}
	}()
	connect := func() (*bus.Conn, error) {
		if *timeout > 0 {
			t := time.AfterFunc(*timeout, func() { cancel(errGaveUp) })
			context.AfterFunc(ctx, func() { t.Stop() })
		}
		opts, err := nf.options()
		if err != nil {
			return nil, err
		}
		return bus.Connect(ctx, *natsURL, "podbus-audit", opts...)
	}
	switch verb {
	case "replay":
		since := fs.String("since", "", "start at this time (RFC 3339, or a duration before now: 15m)")
		seq := fs.Uint64("seq", 0, "start at this audit sequence")
		until := fs.String("until", "", "stop after this time")
		subject := fs.String("subject", "", "only these subjects, comma separated (pod.>, $KV.pods.default.>)")
		out := fs.String("o", audit.FormatTable, "output: table or json (one object per line)")
		follow := fs.Bool("follow", false, "keep printing new records")
		pace := fs.Bool("pace", false, "replay at the original pace")
		verifyChain := fs.Bool("verify-chain", false, "check every record against the audit seals before writing it (the whole log, in order)")
		pubkey := pubkeyFlag(fs)
		sealStream := fs.String("seal-stream", bus.StreamAuditSeal, "the seal blocks' stream")
		if err := parse(fs, args); err != nil {
			return err
		}
		o := audit.ReplayOptions{ScanOptions: audit.ScanOptions{Stream: *stream, StartSeq: *seq, Follow: *follow}, Format: *out, Pace: *pace}
		var err error
		if o.Since, err = audit.ParseTime(*since, time.Now()); err != nil {
			return err
		}
		if o.Until, err = audit.ParseTime(*until, time.Now()); err != nil {
			return err
		}
		if *subject != "" {
			o.Filters = strings.Split(*subject, ",")
		}
		conn, err := connect()
		if err != nil {
			return err
		}
		defer conn.Close()
		if *verifyChain {
			co, err := chainOptions(*pubkey, *sealStream)
			if err != nil {
				return err
			}
			n, res, err := audit.ReplayVerified(ctx, conn.JS, o, co, os.Stdout)
			fmt.Fprintf(os.Stderr, "%d records replayed, %d of %d messages checked against %d seal blocks, %d not yet sealed\n", n, res.Sealed, res.Records, res.Blocks, res.Unsealed)
			printFindings(res)
			return err
		}
		_, err = audit.Replay(ctx, conn.JS, o, os.Stdout)
		if errors.Is(err, context.Canceled) && (o.Follow || !errors.Is(context.Cause(ctx), errGaveUp)) {
			return nil // interrupted, or followed for --timeout
		}
		return err

	case "timeline":
		uid := fs.String("uid", "", "the pod's uid (instead of ns/name)")
		slack := fs.Duration("slack", 2*time.Second, "how far around the pod's store records to look for its pipeline messages")
		if err := parse(fs, args); err != nil {
			return err
		}
		o := audit.TimelineOptions{Stream: *stream, UID: *uid, Slack: *slack}
		if fs.NArg() > 0 {
			var err error
			if o.Namespace, o.Name, err = audit.ParsePodRef(fs.Arg(0)); err != nil {
				return err
			}
		}
		conn, err := connect()
		if err != nil {
			return err
		}
		defer conn.Close()
		incs, err := audit.Timeline(ctx, conn.JS, o)
		if err != nil {
			return err
		}
		return audit.WriteTimeline(os.Stdout, incs)

	case "verify":
		settle := fs.Duration("settle", 3*time.Second, "how long differences may take to disappear (the log trails the store)")
		chain := fs.Bool("chain", false, "check the log against the audit sealer's signed hash chain (and the origin streams) instead")
		pubkey := pubkeyFlag(fs)
		sealStream := fs.String("seal-stream", bus.StreamAuditSeal, "the seal blocks' stream")
		if err := parse(fs, args); err != nil {
			return err
		}
		conn, err := connect()
		if err != nil {
			return err
		}
		defer conn.Close()
		if *chain {
			co, err := chainOptions(*pubkey, *sealStream)
			if err != nil {
				return err
			}
			co.Stream, co.Settle = *stream, *settle
			res, err := audit.VerifyChain(ctx, conn.JS, co)
			printFindings(res)
			if err != nil {
				return err
			}
			fmt.Printf("%d records match their seals (%d blocks, %d records expired by the stream's MaxAge); %d after the last seal are not sealed yet\n",
				res.Sealed, res.Blocks, res.Expired, res.Unsealed)
			return nil
		}
		res, err := audit.Verify(ctx, conn.JS, audit.VerifyOptions{Stream: *stream, Settle: *settle})
		for _, d := range res.Differences {
			fmt.Println(d)
		}
		if err != nil {
			return err
		}
		fmt.Printf("history of %d records rebuilds the %d pods and %d nodes exactly\n", res.Records, res.Pods, res.Nodes)
		return nil

	case "check":
		return runAuditCheck(ctx, fs, args, connect, stream)

	case "what-if":
		profile := profileFlag(fs, " (what-if uses the default-scheduler's, else the first)")
		since := fs.String("since", "", "re-run decisions from this time (earlier ones are taken as recorded)")
		if err := parse(fs, args); err != nil {
			return err
		}
		o := audit.WhatIfOptions{Stream: *stream}
		var err error
		if *profile != "" {
			if o.Profile, err = config.LoadProfile(*profile); err != nil {
				return err
			}
		}
		if o.Since, err = audit.ParseTime(*since, time.Now()); err != nil {
			return err
		}
		conn, err := connect()
		if err != nil {
			return err
		}
		defer conn.Close()
		rep, err := audit.WhatIf(ctx, conn.JS, o)
		if err != nil {
			return err
		}
		return audit.WriteWhatIf(os.Stdout, rep)
	}
	fmt.Fprint(os.Stderr, auditUsage)
	os.Exit(2)
	return nil
}

func pubkeyFlag(fs *flag.FlagSet) *string {
	return fs.String("pubkey", "", "the sealer's public key(s), PEM ("+audit.SealPubKeyFile+" in its data directory); "+
		"without it the first block's key is trusted, which proves the chain consistent but not who sealed it")
}

func chainOptions(pubkey, sealStream string) (audit.ChainOptions, error) {
	co := audit.ChainOptions{SealStream: sealStream}
	if pubkey == "" {
		fmt.Fprintln(os.Stderr, "warning: no --pubkey: trusting the key of the first seal block")
		return co, nil
	}
	keys, err := audit.ReadPublicKeys(pubkey)
	if err != nil {
		return co, err
	}
	co.PublicKeys = keys
	return co, nil
}

// printFindings lists what the chain check found, the first bad record first.
func printFindings(res audit.ChainResult) {
	for i, f := range res.Findings {
		prefix := "  "
		if i == 0 {
			prefix = "first bad record: "
		}
		fmt.Fprintln(os.Stderr, prefix+f.String())
	}
}
