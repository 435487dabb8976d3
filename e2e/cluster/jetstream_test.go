package cluster_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/monovertex/monovertex/internal/testutil"
)

// dialFunc makes a context dial function a nats.CustomDialer.
type dialFunc func(ctx context.Context, network, addr string) (net.Conn, error)

func (d dialFunc) Dial(network, addr string) (net.Conn, error) {
	return d(context.Background(), network, addr)
}

// TestJetStreamCorpus: the corpus's jetstream-log MonoVertex converted with
// mvctl and applied, against a NATS server with JetStream in the cluster at
// the address the manifest names (testdata/nats.yaml). 5,000 messages
// published to the stream are read, written to the log sink and acked:
// counted by the runner and by the durable consumer's ack floor on the
// server.
func TestJetStreamCorpus(t *testing.T) {
	c := newCluster(t)
	const messages = 5000
	mvctl := testutil.Build(t, "./cmd/mvctl")
	out := c.run(time.Minute, mvctl, "convert", "-f", "cmd/mvctl/testdata/corpus/jetstream-log.yaml")
	file := filepath.Join(t.TempDir(), "jetstream-log.knative.yaml")
	if err := os.WriteFile(file, []byte(out), 0o644); err != nil {
		t.Fatal(err)
	}
	ns, ksvc := manifestNamespace(out), serviceName(t, out)
	c.deleteAtEnd(file, "e2e/cluster/testdata/nats.yaml")
	t.Logf("ko apply -f e2e/cluster/testdata/nats.yaml:\n%s", c.run(15*time.Minute, "ko", "apply", "-f", "e2e/cluster/testdata/nats.yaml"))
	c.run(200*time.Second, "kubectl", "-n", "nats", "rollout", "status", "deploy/nats", "--timeout=190s")

	dial := c.nodeDialer(map[string]string{"nats.nats.svc": c.clusterIP("nats", "nats")})
	// kube-proxy programs the Service a moment after the pod is ready.
	var nc *nats.Conn
	testutil.WaitFor(t, 60*time.Second, "a connection to nats.nats.svc:4222", func() bool {
		var err error
		if nc, err = nats.Connect("nats://nats.nats.svc:4222", nats.SetCustomDialer(dialFunc(dial)), nats.SkipHostLookup()); err != nil {
			time.Sleep(time.Second)
			return false
		}
		return true
	})
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	stream, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "orders", Subjects: []string{"orders.>"}})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < messages; i++ {
		if _, err := js.Publish(ctx, fmt.Sprintf("orders.%d", i%10), fmt.Appendf(nil, "order-%d", i)); err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
	}

	t.Logf("mvctl convert -f jetstream-log.yaml | ko apply -f -:\n%s", c.run(15*time.Minute, "ko", "apply", "-f", file))
	c.waitReady(ns, ksvc)
	pod := c.runnerPod(ns, ksvc)
	base := c.portForward(ns, pod, 2469)
	var floor uint64
	var pending int
	testutil.WaitFor(t, 180*time.Second, fmt.Sprintf("the consumer's ack floor at %d", messages), func() bool {
		cons, err := stream.Consumer(ctx, "orders-log")
		if err == nil {
			var info *jetstream.ConsumerInfo
			if info, err = cons.Info(ctx); err == nil {
				floor, pending = info.AckFloor.Stream, info.NumAckPending
				if floor >= messages && pending == 0 {
					return true
				}
			}
		}
		time.Sleep(time.Second)
		return false
	})
	st := status(t, base)
	t.Logf("%s: published %d; runner read %d, written %d, acked %d, nacked %d, duplicates dropped %d; consumer ack floor %d, ack pending %d",
		ksvc, messages, st.Totals.Read, st.Totals.Written, st.Totals.Acked, st.Totals.Nacked, st.Totals.DuplicateDropped, floor, pending)
	if st.Totals.Written < messages || st.Totals.Acked > st.Totals.Written+st.Totals.DuplicateDropped {
		t.Fatalf("written %d of %d; acked %d", st.Totals.Written, messages, st.Totals.Acked)
	}
}
