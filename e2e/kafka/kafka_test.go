// Package kafka_test runs the runner binary with MV_SOURCE=kafka and
// MV_SINK=kafka against kfake, a Kafka cluster speaking the real protocol,
// run as a separate process on 127.0.0.1 (internal/kafkatest). Each test
// ends by counting: every input record is in the output topic, duplicates
// are counted and reported, and the group's committed offsets reach the
// end of every partition. Every runner runs with MV_KAFKA_CHECK_COMMITS,
// which checks each commit against a separate account of unacked records
// and stops the runner if one is beyond them.
package kafka_test

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/monovertex/monovertex/internal/kafkatest"
	"github.com/monovertex/monovertex/internal/testutil"
)

const group = "e2e"

func runnerEnv(c *kafkatest.Cluster, name string) map[string]string {
	return map[string]string{
		"MV_NAME":                  name,
		"MV_SOURCE":                "kafka",
		"MV_SINK":                  "kafka",
		"MV_KAFKA_BROKERS":         c.Brokers(),
		"MV_KAFKA_TOPIC":           "in",
		"MV_KAFKA_GROUP":           group,
		"MV_KAFKA_SINK_TOPIC":      "out",
		"MV_KAFKA_COMMIT_INTERVAL": "200ms",
		"MV_KAFKA_SESSION_TIMEOUT": "3s",
		"MV_KAFKA_REVOKE_TIMEOUT":  "5s",
		"MV_KAFKA_CHECK_COMMITS":   "true",
		"MV_READ_BATCH_SIZE":       "500",
		"MV_READ_TIMEOUT":          "200ms",
		"MV_PENDING_INTERVAL":      "200ms",
		"MV_SHUTDOWN_TIMEOUT":      "20s",
	}
}

func values(from, to int) [][]byte {
	out := make([][]byte, 0, to-from)
	for i := from; i < to; i++ {
		out = append(out, []byte(fmt.Sprintf("m-%07d", i)))
	}
	return out
}

func key(i int) []byte { return []byte("k" + strconv.Itoa(i%64)) }

// committedTotal sums the group's committed offsets over the partitions of in.
func committedTotal(t *testing.T, cl *kgo.Client) int64 {
	var n int64
	for _, o := range kafkatest.Committed(t, cl, group, "in") {
		n += o
	}
	return n
}

// waitCommittedToEnd waits until the group's committed offset of every
// partition of in equals its end offset.
func waitCommittedToEnd(t *testing.T, cl *kgo.Client, timeout time.Duration) {
	t.Helper()
	ends := kafkatest.EndOffsets(t, cl, "in")
	testutil.WaitFor(t, timeout, fmt.Sprintf("committed offsets to reach the ends %v", ends), func() bool {
		c := kafkatest.Committed(t, cl, group, "in")
		for p, e := range ends {
			if c[p] != e {
				return false
			}
		}
		return true
	})
}

// countOutput reads the output topic and checks that every value in
// [0, n) is there; it returns the number of duplicates.
func countOutput(t *testing.T, c *kafkatest.Cluster, n int) int {
	t.Helper()
	recs := kafkatest.ReadAll(t, c, "out")
	seen := make(map[string]int, n)
	for _, r := range recs {
		seen[string(r.Value)]++
	}
	missing := 0
	for _, v := range values(0, n) {
		if seen[string(v)] == 0 {
			missing++
		}
	}
	if missing > 0 || len(seen) != n {
		t.Fatalf("output: %d records, %d distinct, %d of %d inputs missing", len(recs), len(seen), missing, n)
	}
	return len(recs) - n
}

var checkLine = regexp.MustCompile(`"msg":"commit check".*?"commits":(\d+),"violations":(\d+)`)

// checkCommits asserts that a runner that exited cleanly checked its
// commits and found none beyond what was acked, and returns how many.
func checkCommits(t *testing.T, p *testutil.Process) int {
	t.Helper()
	m := checkLine.FindStringSubmatch(p.Stderr.String())
	if m == nil {
		t.Fatalf("%s: no commit check summary in its log", p.Name)
	}
	commits, _ := strconv.Atoi(m[1])
	if m[2] != "0" || commits == 0 {
		t.Fatalf("%s: commit check: %s commits, %s violations", p.Name, m[1], m[2])
	}
	return commits
}

func noFailedCheck(t *testing.T, procs ...*testutil.Process) {
	t.Helper()
	for _, p := range procs {
		if regexp.MustCompile(`commit check failed`).MatchString(p.Stderr.String()) {
			t.Fatalf("%s: a commit went beyond what was acked", p.Name)
		}
	}
}

func stop(t *testing.T, p *testutil.Process) {
	t.Helper()
	p.Stop(40 * time.Second)
}

// 100,000 records over 6 partitions through one runner: all arrive, and
// the group's committed offsets reach the end of every partition.
func TestHundredThousandAcrossSixPartitions(t *testing.T) {
	const n = 100_000
	c := kafkatest.Start(t, 1, map[string]int{"in": 6, "out": 6})
	cl := c.Client(kgo.ProducerLinger(5 * time.Millisecond))
	kafkatest.Produce(t, cl, "in", values(0, n), key)
	start := time.Now()
	r := testutil.StartRunner(t, runnerEnv(c, "e2e-kafka"))
	waitCommittedToEnd(t, cl, 150*time.Second)
	took := time.Since(start)
	testutil.WaitFor(t, 20*time.Second, "pending 0", func() bool {
		st, err := r.Status()
		return err == nil && st.Pending == 0
	})
	stop(t, r)
	commits := checkCommits(t, r)
	dups := countOutput(t, c, n)
	t.Logf("%d records in %v; %d duplicates; %d commits checked", n, took.Round(time.Millisecond), dups, commits)
}

// Three runners in one group while records keep arriving: a second and a
// third join (rebalances), one is killed with SIGKILL mid-stream (its
// partitions move after the session timeout). Nothing is lost; the
// duplicates (records the killed runner wrote but had not committed) are
// counted and reported.
func TestRebalancesJoinAndKill(t *testing.T) {
	const n = 60_000
	c := kafkatest.Start(t, 1, map[string]int{"in": 6, "out": 6})
	cl := c.Client(kgo.ProducerLinger(5 * time.Millisecond))
	produced := make(chan struct{})
	// The third runner must get partitions while records still arrive, or
	// it has nothing to do and the test checks nothing about it: past a
	// third of the records the producer slows down until it is acking.
	thirdActive := make(chan struct{})
	go func() {
		defer close(produced)
		for i := 0; i < n; {
			size := 2000
			if i >= n/3 {
				select {
				case <-thirdActive:
				default:
					size = 200
				}
			}
			size = min(size, n-i)
			kafkatest.Produce(t, cl, "in", values(i, i+size), func(j int) []byte { return key(i + j) })
			i += size
			time.Sleep(100 * time.Millisecond)
		}
	}()
	env := func(name string) map[string]string {
		e := runnerEnv(c, name)
		e["MV_READ_BATCH_SIZE"] = "100" // smaller batches: more commits, more in flight at each rebalance
		return e
	}
	a := testutil.StartRunner(t, env("a"))
	a.Name = "runner a"
	b := testutil.StartRunner(t, env("b"))
	b.Name = "runner b"
	testutil.WaitFor(t, 60*time.Second, "10,000 committed", func() bool { return committedTotal(t, cl) >= 10_000 })
	x := testutil.StartRunner(t, env("c"))
	x.Name = "runner c"
	testutil.WaitFor(t, 60*time.Second, "runner c acking: it joined the group and got partitions", func() bool {
		st, err := x.Status()
		return err == nil && st.Totals.Acked > 0
	})
	close(thirdActive)
	testutil.WaitFor(t, 60*time.Second, "25,000 committed", func() bool { return committedTotal(t, cl) >= 25_000 })
	b.Kill()
	t.Logf("killed runner b at %d committed", committedTotal(t, cl))
	<-produced
	waitCommittedToEnd(t, cl, 150*time.Second)
	stop(t, a)
	stop(t, x)
	noFailedCheck(t, a, b, x)
	commits := checkCommits(t, a) + checkCommits(t, x)
	dups := countOutput(t, c, n)
	t.Logf("%d records, 3 runners, one joined and one killed: 0 lost, %d duplicates; %d commits of the survivors checked", n, dups, commits)
}

// The broker is stopped and started again (same ports, same data
// directory) mid-run; the runner rides it out and nothing is lost.
func TestBrokerRestart(t *testing.T) {
	const n = 30_000
	c := kafkatest.Start(t, 1, map[string]int{"in": 6, "out": 6})
	cl := c.Client(kgo.ProducerLinger(5 * time.Millisecond))
	kafkatest.Produce(t, cl, "in", values(0, n), key)
	env := runnerEnv(c, "restart")
	env["MV_READ_BATCH_SIZE"] = "100"
	r := testutil.StartRunner(t, env)
	testutil.WaitFor(t, 60*time.Second, "3,000 committed", func() bool { return committedTotal(t, cl) >= 3_000 })
	at := committedTotal(t, cl)
	c.Stop()
	time.Sleep(time.Second)
	c.Restart()
	t.Logf("broker restarted at %d committed", at)
	waitCommittedToEnd(t, cl, 150*time.Second)
	stop(t, r)
	noFailedCheck(t, r)
	if strings.Contains(r.Stderr.String(), "kafka topic was deleted") {
		t.Fatal("a broker restart was taken for a deleted topic")
	}
	commits := checkCommits(t, r)
	dups := countOutput(t, c, n)
	t.Logf("%d records across a broker restart: 0 lost, %d duplicates; %d commits checked", n, dups, commits)
}
