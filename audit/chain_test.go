package audit_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/podbus/podbus/audit"
	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/bus/bustest"
	pb "github.com/podbus/podbus/proto/podbusv1"
	"github.com/podbus/podbus/services/auditseal"
)

// writeHistory publishes a small history of every kind of record: pipeline messages on several
// streams, a batch, bucket puts and deletes, and exactly one pod.cmd.delete (the record the tests alter).
func writeHistory(t *testing.T, c *bus.Conn, pods int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	kv, err := bus.OpenBucket(ctx, c.JS, bus.BucketPods)
	if err != nil {
		t.Fatal(err)
	}
	batcher := bus.NewBatcher(c.JS, "scheduler/s")
	var futures []jetstream.PubAckFuture
	for i := range pods {
		name, uid := fmt.Sprintf("p%d", i), fmt.Sprintf("u%d", i)
		h := nats.Header{bus.HdrActor: {"admission/a"}, bus.HdrPodUID: {uid}}
		if _, err := c.JS.PublishMsg(ctx, &nats.Msg{Subject: bus.SubjPodCreate, Header: h, Data: []byte(name)}); err != nil {
			t.Fatal(err)
		}
		if _, err := kv.Put(ctx, bus.PodKey("default", name), []byte(name)); err != nil {
			t.Fatal(err)
		}
		f, err := batcher.PublishAsync(bus.SubjPodScheduled, &pb.SchedulingDecision{Uid: uid, Node: "n1"}, bus.Meta{PodUID: uid})
		if err != nil {
			t.Fatal(err)
		}
		futures = append(futures, f)
		if _, err := c.JS.Publish(ctx, bus.SubjPodStatus("n1"), []byte("running "+name)); err != nil {
			t.Fatal(err)
		}
	}
	if err := bus.Wait(ctx, futures...); err != nil {
		t.Fatal(err)
	}
	if _, err := c.JS.Publish(ctx, bus.SubjPodDelete, []byte("p0")); err != nil {
		t.Fatal(err)
	}
	if err := kv.Delete(ctx, bus.PodKey("default", "p0")); err != nil {
		t.Fatal(err)
	}
}

// settled waits until AUDIT holds every message of its origins.
func settled(t *testing.T, c *bus.Conn) {
	t.Helper()
	bustest.Eventually(t, 10*time.Second, func() bool {
		var want uint64
		for _, s := range []string{bus.StreamPods, bus.StreamStatus, bus.KVStream(bus.BucketPods)} {
			want += bustest.StreamInfo(t, c, s).State.Msgs
		}
		return bustest.StreamInfo(t, c, bus.StreamAudit).State.Msgs >= want
	}, "AUDIT sources the history")
}

// seal runs a sealer until everything in AUDIT is sealed, then stops it.
func seal(t *testing.T, c *bus.Conn, key ed25519.PrivateKey) {
	t.Helper()
	s, err := auditseal.New(auditseal.Config{ID: "seal-0", Key: key, BlockRecords: 7, BlockInterval: 50 * time.Millisecond}, c)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	last := bustest.StreamInfo(t, c, bus.StreamAudit).State.LastSeq
	bustest.Eventually(t, 10*time.Second, func() bool {
		b, err := lastSeal(ctx, c)
		return err == nil && b.To() >= last
	}, "the sealer seals AUDIT up to seq %d", last)
}

// lastSeal is the newest block of the seal stream.
func lastSeal(ctx context.Context, c *bus.Conn) (*audit.Block, error) {
	st, err := c.JS.Stream(ctx, bus.StreamAuditSeal)
	if err != nil {
		return nil, err
	}
	m, err := st.GetLastMsgForSubject(ctx, bus.SubjAuditSeal)
	if err != nil {
		return nil, err
	}
	return audit.DecodeBlock(m.Data)
}

// sealedLog makes a sealed history on a server of the test's own.
func sealedLog(t *testing.T) (*bus.Conn, ed25519.PublicKey) {
	t.Helper()
	_, c := bustest.Start(t)
	writeHistory(t, c, 6)
	settled(t, c)
	pub, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	seal(t, c, key)
	return c, pub
}

// replaceAudit is what an administrator can do to the log through the API: mirror it into a copy
// (subjects rewritten by transforms, when given), edit the copy, delete AUDIT and re-create it as a
// mirror of the copy: same sequences, headers and times, minus what the edit took out.
func replaceAudit(t *testing.T, c *bus.Conn, transforms map[string]string, edit func(jetstream.Stream)) {
	t.Helper()
	ctx := context.Background()
	src := &jetstream.StreamSource{Name: bus.StreamAudit}
	if transforms != nil {
		// A mirror with transforms copies only the subjects they name: name them all.
		for _, subj := range storedSubjects(t, c) {
			dest := subj
			if d, ok := transforms[subj]; ok {
				dest = d
			}
			src.SubjectTransforms = append(src.SubjectTransforms, jetstream.SubjectTransformConfig{Source: subj, Destination: dest})
		}
	}
	want := bustest.StreamInfo(t, c, bus.StreamAudit).State.Msgs
	stage, err := c.JS.CreateStream(ctx, jetstream.StreamConfig{Name: "STAGE", Mirror: src})
	if err != nil {
		t.Fatal(err)
	}
	bustest.Eventually(t, 10*time.Second, func() bool { return bustest.StreamInfo(t, c, "STAGE").State.Msgs == want }, "the copy mirrors AUDIT")
	edit(stage)
	cfg := bustest.StreamInfo(t, c, "STAGE").Config
	cfg.Mirror = nil
	if _, err := c.JS.UpdateStream(ctx, cfg); err != nil {
		t.Fatalf("detach the copy: %v", err)
	}
	if err := c.JS.DeleteStream(ctx, bus.StreamAudit); err != nil {
		t.Fatal(err)
	}
	if _, err := c.JS.CreateStream(ctx, jetstream.StreamConfig{Name: bus.StreamAudit, Mirror: &jetstream.StreamSource{Name: "STAGE"}}); err != nil {
		t.Fatal(err)
	}
	staged := bustest.StreamInfo(t, c, "STAGE").State
	bustest.Eventually(t, 10*time.Second, func() bool {
		st := bustest.StreamInfo(t, c, bus.StreamAudit).State
		return st.Msgs == staged.Msgs
	}, "AUDIT mirrors the edited copy")
}

// storedSubjects are the distinct subjects of the messages stored in AUDIT (a batch's, not its entries').
func storedSubjects(t *testing.T, c *bus.Conn) []string {
	t.Helper()
	var out []string
	seen := map[string]bool{}
	info := bustest.StreamInfo(t, c, bus.StreamAudit)
	s, _ := c.JS.Stream(context.Background(), bus.StreamAudit)
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq; seq++ {
		m, err := s.GetMsg(context.Background(), seq)
		if err != nil {
			t.Fatal(err)
		}
		if !seen[m.Subject] {
			seen[m.Subject] = true
			out = append(out, m.Subject)
		}
	}
	return out
}

// subjectsBySeq maps each AUDIT sequence to its stored subject.
func subjectsBySeq(t *testing.T, c *bus.Conn) map[uint64]string {
	t.Helper()
	out := map[uint64]string{}
	info := bustest.StreamInfo(t, c, bus.StreamAudit)
	s, _ := c.JS.Stream(context.Background(), bus.StreamAudit)
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq; seq++ {
		m, err := s.GetMsg(context.Background(), seq)
		if err != nil {
			t.Fatal(err)
		}
		out[seq] = m.Subject
	}
	return out
}

// seqOf is the AUDIT sequence of the only stored message on subject.
func seqOf(t *testing.T, c *bus.Conn, subject string) uint64 {
	t.Helper()
	m := bustest.LastMsg(t, c, bus.StreamAudit, subject)
	if m == nil {
		t.Fatalf("no %s in AUDIT", subject)
	}
	return m.Sequence
}

func verify(t *testing.T, c *bus.Conn, pub ed25519.PublicKey) (audit.ChainResult, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return audit.VerifyChain(ctx, c.JS, audit.ChainOptions{PublicKeys: []ed25519.PublicKey{pub}, Settle: 300 * time.Millisecond})
}

func TestVerifyChainClean(t *testing.T) {
	c, pub := sealedLog(t)
	res, err := verify(t, c, pub)
	if err != nil {
		t.Fatalf("a clean log: %v (%v)", err, res.Findings)
	}
	if res.Records == 0 || res.Sealed != res.Records || res.Unsealed != 0 || res.Blocks < 2 || !res.KeyTrusted {
		t.Errorf("clean log: %+v, want every record sealed over several blocks", res)
	}
	// Records after the last seal are reported as such, not as tampering.
	writeHistory(t, c, 1)
	settled(t, c)
	res, err = verify(t, c, pub)
	if err != nil || res.Unsealed == 0 {
		t.Errorf("unsealed tail: %+v, %v; want it counted and no error", res, err)
	}
}

func TestVerifyChainDetectsTampering(t *testing.T) {
	tests := []struct {
		name string
		// tamper changes the log and returns the first bad record's AUDIT sequence (0: past the end).
		tamper   func(t *testing.T, c *bus.Conn) uint64
		kind     string
		subject  string // of the first bad record, as sealed ("" : not checked)
		replaced bool   // a finding of the stream's replacement comes too
	}{{
		name: "delete a record",
		tamper: func(t *testing.T, c *bus.Conn) uint64 {
			seq := bustest.StreamInfo(t, c, bus.StreamAudit).State.LastSeq / 2
			replaceAudit(t, c, nil, func(s jetstream.Stream) {
				if err := s.DeleteMsg(context.Background(), seq); err != nil {
					t.Fatal(err)
				}
			})
			return seq
		},
		kind: audit.FindDeleted, replaced: true,
	}, {
		name: "alter a record",
		tamper: func(t *testing.T, c *bus.Conn) uint64 {
			seq := seqOf(t, c, bus.SubjPodDelete)
			replaceAudit(t, c, map[string]string{bus.SubjPodDelete: bus.SubjPodUpdate}, func(jetstream.Stream) {})
			return seq
		},
		kind: audit.FindAltered, subject: bus.SubjPodDelete, replaced: true,
	}, {
		name: "truncate the tail",
		tamper: func(t *testing.T, c *bus.Conn) uint64 {
			last := bustest.StreamInfo(t, c, bus.StreamAudit).State.LastSeq
			replaceAudit(t, c, nil, func(s jetstream.Stream) {
				for seq := last - 2; seq <= last; seq++ {
					if err := s.DeleteMsg(context.Background(), seq); err != nil {
						t.Fatal(err)
					}
				}
			})
			return last - 2
		},
		kind: audit.FindTruncated, replaced: true,
	}, {
		name: "replace the stream with an exact copy",
		tamper: func(t *testing.T, c *bus.Conn) uint64 {
			replaceAudit(t, c, nil, func(jetstream.Stream) {})
			return bustest.StreamInfo(t, c, bus.StreamAudit).State.FirstSeq
		},
		kind: audit.FindReplaced,
	}, {
		name: "trim the head (MaxMsgs)",
		tamper: func(t *testing.T, c *bus.Conn) uint64 {
			cfg := bustest.StreamInfo(t, c, bus.StreamAudit).Config
			first := bustest.StreamInfo(t, c, bus.StreamAudit).State.FirstSeq
			cfg.MaxMsgs = 3
			if _, err := c.JS.UpdateStream(context.Background(), cfg); err != nil {
				t.Fatal(err)
			}
			return first
		},
		kind: audit.FindDeleted,
	}, {
		name: "trim the seals' head (MaxMsgs)",
		tamper: func(t *testing.T, c *bus.Conn) uint64 {
			ctx := context.Background()
			cfg := bustest.StreamInfo(t, c, bus.StreamAuditSeal).Config
			cfg.MaxMsgs = 1
			if _, err := c.JS.UpdateStream(ctx, cfg); err != nil {
				t.Fatal(err)
			}
			b, err := lastSeal(ctx, c)
			if err != nil {
				t.Fatal(err)
			}
			return b.From
		},
		kind: audit.FindBadSeal,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, pub := sealedLog(t)
			if _, err := verify(t, c, pub); err != nil {
				t.Fatalf("before tampering: %v", err)
			}
			sealed := subjectsBySeq(t, c)
			seq := tt.tamper(t, c)
			res, err := verify(t, c, pub)
			if !errors.Is(err, audit.ErrChainBroken) {
				t.Fatalf("verify after tampering: %v, want ErrChainBroken", err)
			}
			t.Logf("%v: %v", err, res.Findings)
			first := res.First()
			if tt.subject == "" {
				tt.subject = sealed[seq]
			}
			if first.Kind != tt.kind || first.Seq != seq || first.Subject != tt.subject || first.Origin == "" {
				t.Errorf("first finding %v, want %s at seq %d (%s)", first, tt.kind, seq, tt.subject)
			}
			replaced := false
			for _, f := range res.Findings {
				replaced = replaced || f.Kind == audit.FindReplaced
			}
			if replaced != (tt.replaced || tt.kind == audit.FindReplaced) {
				t.Errorf("replacement reported: %v, want %v (%v)", replaced, tt.replaced, res.Findings)
			}
		})
	}
}

// A seal made with another key than the one given is not trusted.
func TestVerifyChainUntrustedKey(t *testing.T) {
	c, _ := sealedLog(t)
	other, _, _ := ed25519.GenerateKey(rand.Reader)
	res, err := verify(t, c, other)
	if !errors.Is(err, audit.ErrChainBroken) || res.First().Kind != audit.FindBadSeal {
		t.Fatalf("verify with another key: %v (%v), want a bad seal", err, res.Findings)
	}
}

// A message removed from an origin stream before AUDIT sourced it shows as a gap in that origin's
// sequences, even though the sealer sealed the log as it found it.
func TestVerifyChainOriginGap(t *testing.T) {
	_, url := bustest.Server(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := bus.Connect(ctx, url, t.Name())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := bus.Provision(ctx, c.JS, bus.Options{NoAudit: true}); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if _, err := c.JS.Publish(ctx, bus.SubjPodStatus("n1"), []byte(fmt.Sprint(i))); err != nil {
			t.Fatal(err)
		}
	}
	st, _ := c.JS.Stream(ctx, bus.StreamStatus)
	if err := st.DeleteMsg(ctx, 2); err != nil {
		t.Fatal(err)
	}
	if err := bus.Provision(ctx, c.JS, bus.Options{}); err != nil {
		t.Fatal(err)
	}
	bustest.Eventually(t, 10*time.Second, func() bool { return bustest.StreamInfo(t, c, bus.StreamAudit).State.Msgs == 2 }, "AUDIT sources STATUS")
	pub, key, _ := ed25519.GenerateKey(rand.Reader)
	seal(t, c, key)
	res, err := verify(t, c, pub)
	if !errors.Is(err, audit.ErrChainBroken) {
		t.Fatalf("verify: %v, want ErrChainBroken", err)
	}
	if f := res.First(); f.Kind != audit.FindGap || f.Seq != 2 || f.Origin != bus.StreamStatus || f.OriginSeq != 3 {
		t.Errorf("first finding %v, want a gap at seq 2 (STATUS 3)", f)
	}
}

// Two records swapped (read back in the wrong order: the server's API cannot rearrange a stream, a
// rewrite of its files can) are reported at the first of them.
func TestVerifyChainDetectsReorder(t *testing.T) {
	c, pub := sealedLog(t)
	subjects := subjectsBySeq(t, c)
	const at = 5
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	o := audit.WithReadBack(audit.ChainOptions{PublicKeys: []ed25519.PublicKey{pub}, Settle: 300 * time.Millisecond},
		func(msgs []audit.RawMsg, digests []audit.Digest) {
			for i := range msgs {
				if msgs[i].Seq == at && i+1 < len(msgs) {
					// Each keeps its place in the stream (its sequence), the contents change places.
					msgs[i].Seq, msgs[i+1].Seq = msgs[i+1].Seq, msgs[i].Seq
					msgs[i], msgs[i+1] = msgs[i+1], msgs[i]
					digests[i], digests[i+1] = digests[i+1], digests[i]
					return
				}
			}
		})
	res, err := audit.VerifyChain(ctx, c.JS, o)
	if !errors.Is(err, audit.ErrChainBroken) {
		t.Fatalf("verify: %v, want ErrChainBroken", err)
	}
	t.Log(err)
	if f := res.First(); f.Kind != audit.FindReordered || f.Seq != at || f.Subject != subjects[at] {
		t.Errorf("first finding %v, want reordered at seq %d (%s)", f, at, subjects[at])
	}
}
