package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/podbus/podbus/audit/check"
	"github.com/podbus/podbus/bus"
)

// runAuditCheck is "podbus audit check": the history checker (package audit/check). It prints each
// violation (kind, pod, uid, node, revision) and fails when there is one.
func runAuditCheck(ctx context.Context, fs *flag.FlagSet, args []string, connect func() (*bus.Conn, error), stream *string) error {
	workload := fs.String("workload", "", "the workload's log (JSON lines: op, namespace, name, uid, gen, code) to check every 201 against")
	end := fs.Bool("end", false, "check the end state too: every pod Ready or terminal, none terminating, nothing on dead.>")
	wait := fs.Duration("wait", 0, "with --end, how long the end state may take to settle before its violations count")
	if err := parse(fs, args); err != nil {
		return err
	}
	o := check.Options{Stream: *stream, EndState: *end}
	if *workload != "" {
		f, err := os.Open(*workload)
		if err != nil {
			return err
		}
		o.Workload, err = check.ReadWorkload(f)
		_ = f.Close()
		if err != nil {
			return err
		}
	}
	conn, err := connect()
	if err != nil {
		return err
	}
	defer conn.Close()
	res, err := checkSettled(ctx, conn, o, *wait)
	for _, v := range res.Violations {
		fmt.Println(v)
	}
	if err != nil {
		return err
	}
	fmt.Printf("%d records, %d pods (%d created by the workload, %d deleted): no violation\n", res.Records, res.Pods, res.Created, res.Deleted)
	return nil
}

// checkSettled checks once the history has caught up with its sources, again until wait passes while
// violations remain: the end state of a system that is still settling improves, a broken history does not.
func checkSettled(ctx context.Context, conn *bus.Conn, o check.Options, wait time.Duration) (check.Result, error) {
	deadline := time.Now().Add(wait)
	for {
		ok, err := check.CaughtUp(ctx, conn.JS, o.Stream)
		if err != nil {
			return check.Result{}, err
		}
		if ok {
			res, err := check.Check(ctx, conn.JS, o)
			if !errors.Is(err, check.ErrViolations) || time.Now().After(deadline) {
				return res, err
			}
		} else if time.Now().After(deadline.Add(30 * time.Second)) {
			return check.Result{}, fmt.Errorf("the audit log has not caught up with its sources")
		}
		select {
		case <-ctx.Done():
			return check.Result{}, ctx.Err()
		case <-time.After(time.Second):
		}
	}
}
