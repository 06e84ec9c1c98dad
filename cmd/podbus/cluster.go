package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/internal/podutil"
	pb "github.com/podbus/podbus/proto/podbusv1"
)

// clusterSummary is what `podbus cluster` shows.
type clusterSummary struct {
	Nodes, NodesReady int
	Pods              map[string]int // by phase
	Consumers         []consumerLag
	Parked            uint64
	ParkedBySubject   map[string]uint64
	Schedulers        []string // replica ids heard on bus.SubjSchedulerMembers
}

// consumerLag is a durable consumer's backlog: messages not yet delivered and delivered but not acked.
type consumerLag struct {
	Stream, Name        string
	Consumers           int // folded into this line (see consumerGroup)
	Pending, AckPending uint64
}

// lagStreams are the streams whose durable consumers carry the pipeline.
var lagStreams = []string{bus.StreamPods, bus.StreamStatus, bus.StreamHeartbeats, bus.StreamAudit}

func runCluster(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("cluster", flag.ExitOnError)
	natsURL := fs.String("nats", "nats://127.0.0.1:4222", "NATS server URL(s), comma separated")
	var nf natsFlags
	nf.register(fs)
	listen := fs.Duration("schedulers-wait", 2*time.Second, "listen this long for scheduler replicas' announcements (they beat every second)")
	if err := parse(fs, args); err != nil {
		return err
	}
	opts, err := nf.options()
	if err != nil {
		return err
	}
	conn, err := bus.Connect(ctx, *natsURL, "podbus-cluster", opts...)
	if err != nil {
		return err
	}
	defer conn.Close()
	s, err := readCluster(ctx, conn.NC, conn.JS, *listen)
	if err != nil {
		return err
	}
	s.print(os.Stdout)
	return nil
}

// readCluster reads the summary with read-only requests (natsauth.RoleReader suffices): the nodes and
// pods buckets, consumer and stream infos, and the schedulers' announcements for listen.
func readCluster(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, listen time.Duration) (clusterSummary, error) {
	s := clusterSummary{Pods: map[string]int{}, ParkedBySubject: map[string]uint64{}}
	var mu sync.Mutex
	heard := map[string]bool{}
	sub, err := nc.Subscribe(bus.SubjSchedulerMembers, func(m *nats.Msg) {
		mu.Lock()
		defer mu.Unlock()
		heard[string(m.Data)] = true
	})
	if err != nil {
		return s, fmt.Errorf("listen for schedulers: %w", err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	deadline := time.Now().Add(listen)

	err = eachValue(ctx, js, bus.BucketNodes, func() proto.Message { return &pb.Node{} }, func(m proto.Message) {
		s.Nodes++
		if podutil.NodeIsReady(m.(*pb.Node)) {
			s.NodesReady++
		}
	})
	if err != nil {
		return s, err
	}
	err = eachValue(ctx, js, bus.BucketPods, func() proto.Message { return &pb.Pod{} }, func(m proto.Message) {
		s.Pods[cmp.Or(m.(*pb.Pod).GetStatus().GetPhase(), "Pending")]++
	})
	if err != nil {
		return s, err
	}
	if s.Consumers, err = consumerLags(ctx, js); err != nil {
		return s, err
	}
	dead, err := js.Stream(ctx, bus.StreamDead)
	if err != nil {
		return s, fmt.Errorf("stream %s: %w", bus.StreamDead, err)
	}
	di, err := dead.Info(ctx, jetstream.WithSubjectFilter(bus.SubjAllDead))
	if err != nil {
		return s, fmt.Errorf("stream %s: %w", bus.StreamDead, err)
	}
	s.Parked = di.State.Msgs
	maps.Copy(s.ParkedBySubject, di.State.Subjects)

	select {
	case <-ctx.Done():
		return s, ctx.Err()
	case <-time.After(time.Until(deadline)):
	}
	mu.Lock()
	s.Schedulers = slices.Sorted(maps.Keys(heard))
	mu.Unlock()
	return s, nil
}

// eachValue hands f every live value of bucket, read with one watch rather than a get per key.
func eachValue(ctx context.Context, js jetstream.JetStream, bucket string, mk func() proto.Message, f func(proto.Message)) error {
	kv, err := js.KeyValue(ctx, bucket)
	if err != nil {
		return fmt.Errorf("bucket %s: %w", bucket, err)
	}
	w, err := kv.WatchAll(ctx, jetstream.IgnoreDeletes())
	if err != nil {
		return fmt.Errorf("watch %s: %w", bucket, err)
	}
	defer func() { _ = w.Stop() }()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case e, ok := <-w.Updates():
			if !ok {
				if err := ctx.Err(); err != nil {
					return err
				}
				return fmt.Errorf("read %s: %w", bucket, bus.ErrWatchEnded) // a partial read is no read
			}
			if e == nil { // the initial values are all delivered
				return nil
			}
			m := mk()
			if err := proto.Unmarshal(e.Value(), m); err != nil {
				return fmt.Errorf("decode %s/%s: %w", bucket, e.Key(), errors.Join(bus.ErrMalformed, err))
			}
			f(m)
		}
	}
}

// consumerGroup names the line a durable consumer is folded into: there is one per real node (agents)
// and one per partition of constrained pods (the scheduler's), too many lines for one screen.
func consumerGroup(durable string) string {
	switch {
	case bus.IsAgentConsumer(durable):
		return "agents"
	case strings.HasPrefix(durable, bus.ConsumerSchedulerGroup):
		return bus.ConsumerSchedulerGroup + "*"
	}
	return durable
}

// consumerLags lists the durable consumers of lagStreams, folded as consumerGroup says.
func consumerLags(ctx context.Context, js jetstream.JetStream) ([]consumerLag, error) {
	var out []consumerLag
	for _, name := range lagStreams {
		st, err := js.Stream(ctx, name)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			continue // AUDIT is optional
		}
		if err != nil {
			return nil, fmt.Errorf("stream %s: %w", name, err)
		}
		groups := map[string]*consumerLag{}
		list := st.ListConsumers(ctx)
		for ci := range list.Info() {
			if ci.Config.Durable == "" {
				continue // a watcher's ordered consumer
			}
			g := consumerGroup(ci.Name)
			l := groups[g]
			if l == nil {
				l = &consumerLag{Stream: name, Name: g}
				groups[g] = l
			}
			l.Consumers++
			l.Pending += ci.NumPending
			l.AckPending += uint64(ci.NumAckPending)
		}
		if err := list.Err(); err != nil {
			return nil, fmt.Errorf("consumers of %s: %w", name, err)
		}
		for _, g := range slices.Sorted(maps.Keys(groups)) {
			out = append(out, *groups[g])
		}
	}
	return out, nil
}

// parkedSubjectsShown bounds the parked subjects listed, to keep the summary on one screen.
const parkedSubjectsShown = 5

func (s clusterSummary) print(w io.Writer) {
	fmt.Fprintf(w, "nodes       %d Ready, %d NotReady, %d total\n", s.NodesReady, s.Nodes-s.NodesReady, s.Nodes)
	total := 0
	var phases []string
	for _, ph := range slices.Sorted(maps.Keys(s.Pods)) {
		total += s.Pods[ph]
		phases = append(phases, fmt.Sprintf("%d %s", s.Pods[ph], ph))
	}
	fmt.Fprintf(w, "pods        %d total", total)
	if len(phases) > 0 {
		fmt.Fprintf(w, ": %s", strings.Join(phases, ", "))
	}
	fmt.Fprintln(w)
	sched := "none heard"
	if len(s.Schedulers) > 0 {
		sched = strings.Join(s.Schedulers, ", ")
	}
	fmt.Fprintf(w, "schedulers  %d alive (%s)\n", len(s.Schedulers), sched)
	fmt.Fprintf(w, "parked      %d on %s", s.Parked, bus.SubjAllDead)
	subjects := slices.SortedFunc(maps.Keys(s.ParkedBySubject), func(a, b string) int {
		return cmp.Or(cmp.Compare(s.ParkedBySubject[b], s.ParkedBySubject[a]), cmp.Compare(a, b))
	})
	for i, subj := range subjects {
		if i == parkedSubjectsShown {
			fmt.Fprintf(w, "\n            … %d more subjects", len(subjects)-i)
			break
		}
		fmt.Fprintf(w, "\n            %d %s", s.ParkedBySubject[subj], subj)
	}
	fmt.Fprintf(w, "\n\n%-10s %-24s %10s %12s\n", "STREAM", "CONSUMER", "PENDING", "ACK PENDING")
	for _, c := range s.Consumers {
		name := c.Name
		if c.Consumers > 1 || name == "agents" {
			name = fmt.Sprintf("%s (%d)", c.Name, c.Consumers)
		}
		fmt.Fprintf(w, "%-10s %-24s %10d %12d\n", c.Stream, name, c.Pending, c.AckPending)
	}
}
