package kafka_test

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/monovertex/monovertex/internal/kafkatest"
	"github.com/monovertex/monovertex/internal/testutil"
)

// orderedReceiver is a CloudEvents receiver that takes each event a
// random 0-4ms and checks, per lane (key, or partition with byPartition),
// that events come one at a time in offset order; it counts the events it
// got and the most at once.
type orderedReceiver struct {
	byPartition bool
	mu          sync.Mutex
	last        map[string]int64 // lane -> latest offset
	busy        map[string]int   // lane -> events of the lane being received
	got         map[string]int   // partition:<p>/offset:<o> -> deliveries
	now, peak   int
	overtaken   int
	together    int
	firstBroken string
}

func newOrderedReceiver(byPartition bool) *orderedReceiver {
	return &orderedReceiver{byPartition: byPartition, last: map[string]int64{}, busy: map[string]int{}, got: map[string]int{}}
}

func (o *orderedReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	id, key := r.Header.Get("ce-id"), r.Header.Get("ce-key")
	// A KafkaSource's event ID: partition:<p>/offset:<o>.
	part, offStr, _ := strings.Cut(id, "/offset:")
	off, err := strconv.ParseInt(offStr, 10, 64)
	if key == "" || err != nil {
		http.Error(w, "want ce-key and a KafkaSource's ce-id, got "+key+" "+id, http.StatusBadRequest)
		return
	}
	if o.byPartition {
		key = part
	}
	o.mu.Lock()
	o.now++
	o.peak = max(o.peak, o.now)
	if last, ok := o.last[key]; ok && off <= last {
		o.overtaken++
		if o.firstBroken == "" {
			o.firstBroken = fmt.Sprintf("%s: offset %d after %d", key, off, last)
		}
	}
	o.last[key] = max(o.last[key], off)
	if o.busy[key]++; o.busy[key] > 1 {
		o.together++
		if o.firstBroken == "" {
			o.firstBroken = fmt.Sprintf("%s: %d events at once", key, o.busy[key])
		}
	}
	o.mu.Unlock()
	time.Sleep(time.Duration(rand.IntN(4000)) * time.Microsecond)
	o.mu.Lock()
	o.busy[key]--
	o.now--
	o.got[id]++
	o.mu.Unlock()
	w.WriteHeader(http.StatusAccepted)
}

// TestOrderingToACloudEventsSink: 3000 records over 100 keys in 4
// partitions, read by the Kafka source as a KafkaSource's events
// (MV_KAFKA_CE_MODE=knative) and delivered to a receiver that takes 0-4ms
// per event. With MV_ORDERING=key the receiver sees each key's offsets
// strictly increasing, one event at a time, and keys overlap; with
// partition (Knative's ordered) each partition's. Every record arrives
// and the group's commits reach the end of every partition.
func TestOrderingToACloudEventsSink(t *testing.T) {
	for _, mode := range []string{"key", "partition"} {
		t.Run(mode, func(t *testing.T) { orderingToACloudEventsSink(t, mode) })
	}
}

func orderingToACloudEventsSink(t *testing.T, mode string) {
	const n, keys = 3000, 100
	c := kafkatest.Start(t, 1, map[string]int{"in": 4})
	cl := c.Client(kgo.ProducerLinger(5 * time.Millisecond))
	kafkatest.Produce(t, cl, "in", values(0, n), func(i int) []byte { return []byte("key-" + strconv.Itoa(i%keys)) })
	recv := newOrderedReceiver(mode == "partition")
	srv := httptest.NewServer(recv)
	t.Cleanup(srv.Close)

	env := runnerEnv(c, "e2e-kafka-ordering")
	delete(env, "MV_KAFKA_SINK_TOPIC")
	env["MV_SINK"] = "cloudevents"
	env["K_SINK"] = srv.URL
	env["MV_KAFKA_CE_MODE"] = "knative"
	env["NAMESPACE"] = "e2e"
	env["MV_ORDERING"] = mode
	r := testutil.StartRunner(t, env)
	start := time.Now() // after the build StartRunner may do
	waitCommittedToEnd(t, cl, 120*time.Second)
	took := time.Since(start)
	stop(t, r)
	commits := checkCommits(t, r)

	recv.mu.Lock()
	defer recv.mu.Unlock()
	dups := 0
	for _, c := range recv.got {
		dups += c - 1
	}
	t.Logf("MV_ORDERING=%s: %d records over %d keys committed %v after the start; %d events received (%d distinct, %d duplicates); most at once %d; %d commits checked",
		mode, n, keys, took.Round(time.Millisecond), len(recv.got)+dups, len(recv.got), dups, recv.peak, commits)
	if len(recv.got) != n {
		t.Fatalf("%d distinct events received, want %d", len(recv.got), n)
	}
	if recv.overtaken > 0 || recv.together > 0 {
		t.Fatalf("per %s: %d events at or below an offset already received, %d while another of the same was in; first: %s", mode,
			recv.overtaken, recv.together, recv.firstBroken)
	}
	if recv.peak < 2 {
		t.Fatalf("at most %d event at once; want the %ss to overlap", recv.peak, mode)
	}
}
