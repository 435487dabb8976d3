// Package kafkatest runs a Kafka cluster for tests: franz-go's kfake,
// which speaks the real protocol, started as a separate process on
// 127.0.0.1 (./internal/kafkatest/cmd/kfake) with its state in a test temp
// dir, so it can be killed, and restarted on the same ports with its
// topics, records and committed offsets. It also has the small client
// helpers the tests share: produce, read a whole topic, committed offsets.
package kafkatest

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/monovertex/monovertex/internal/testutil"
)

// Cluster is a kfake process.
type Cluster struct {
	t       testing.TB
	bin     string
	dataDir string
	topics  string
	ports   []int
	addrs   []string
	proc    *testutil.Process
	sec     Security
}

// Security is how the brokers make clients authenticate; the zero value
// is plaintext without SASL.
type Security struct {
	// CertFile and KeyFile are the brokers' PEM certificate and key; set,
	// the brokers speak only TLS.
	CertFile, KeyFile string
	// ClientCAFile, set, makes the brokers require a client certificate
	// signed by this PEM CA.
	ClientCAFile string
	// SASL is MECHANISM:USER:PASSWORD of the one user the brokers accept.
	SASL string
	// OAuthTokens, set, make the brokers require SASL OAUTHBEARER with one
	// of these tokens (not with TLS or SASL).
	OAuthTokens []string
	// ClientOpts are what the test's own clients (Client, ReadAll) need to
	// connect: kgo.DialTLSConfig, kgo.SASL.
	ClientOpts []kgo.Opt
}

// Start starts a cluster of brokers brokers with the topics (name ->
// partitions) created, and stops it when the test ends.
func Start(t testing.TB, brokers int, topics map[string]int) *Cluster {
	t.Helper()
	return StartSecure(t, brokers, topics, Security{})
}

// StartSecure is Start with brokers that require TLS and/or SASL as sec
// says.
func StartSecure(t testing.TB, brokers int, topics map[string]int, sec Security) *Cluster {
	t.Helper()
	var tl []string
	for name, n := range topics {
		tl = append(tl, fmt.Sprintf("%s:%d", name, n))
	}
	sort.Strings(tl)
	c := &Cluster{t: t, bin: testutil.Build(t, "./internal/kafkatest/cmd/kfake"), dataDir: t.TempDir(), topics: strings.Join(tl, ","), ports: make([]int, brokers), sec: sec}
	// Ports of testutil.FreePort's, which nothing else takes while the
	// cluster is down between a Stop and a Restart.
	for i := range c.ports {
		c.ports[i] = testutil.FreePort(t)
	}
	c.start()
	return c
}

func (c *Cluster) start() {
	c.t.Helper()
	ports := make([]string, len(c.ports))
	for i, p := range c.ports {
		ports[i] = strconv.Itoa(p)
	}
	args := []string{"-ports", strings.Join(ports, ","), "-data-dir", c.dataDir}
	if c.topics != "" {
		args = append(args, "-topics", c.topics)
	}
	if c.sec.CertFile != "" {
		args = append(args, "-tls-cert", c.sec.CertFile, "-tls-key", c.sec.KeyFile)
	}
	if c.sec.ClientCAFile != "" {
		args = append(args, "-tls-client-ca", c.sec.ClientCAFile)
	}
	if c.sec.SASL != "" {
		args = append(args, "-sasl", c.sec.SASL)
	}
	if len(c.sec.OAuthTokens) > 0 {
		args = append(args, "-oauthbearer", strings.Join(c.sec.OAuthTokens, ","))
	}
	c.proc = testutil.Start(c.t, "kfake", c.bin, nil, args...)
	testutil.WaitFor(c.t, 30*time.Second, "kfake ready", func() bool {
		if c.proc.Exited() {
			c.t.Fatalf("kfake exited with %d: %s", c.proc.ExitCode(), c.proc.Stderr.String())
		}
		return strings.Contains(c.proc.Stdout.String(), "ready\n")
	})
	c.addrs = c.addrs[:0]
	for _, line := range strings.Split(c.proc.Stdout.String(), "\n") {
		if a, ok := strings.CutPrefix(line, "addr "); ok {
			c.addrs = append(c.addrs, a)
		}
	}
	for i, a := range c.addrs {
		if i < len(c.ports) {
			_, p, _ := strings.Cut(a, ":")
			c.ports[i], _ = strconv.Atoi(p)
		}
	}
}

// Brokers is the comma-separated broker list, for MV_KAFKA_BROKERS.
func (c *Cluster) Brokers() string { return strings.Join(c.addrs, ",") }

// Stop shuts the cluster down cleanly (SIGTERM), which writes its state.
func (c *Cluster) Stop() {
	c.t.Helper()
	c.proc.Signal(syscall.SIGTERM)
	if code := c.proc.Wait(30 * time.Second); code != 0 {
		c.t.Fatalf("kfake exited with %d on SIGTERM: %s", code, c.proc.Stderr.String())
	}
}

// Restart starts the cluster again on the same ports and data directory.
func (c *Cluster) Restart() {
	c.t.Helper()
	c.start()
}

// Client returns a client of the cluster, closed when the test ends.
func (c *Cluster) Client(opts ...kgo.Opt) *kgo.Client {
	c.t.Helper()
	cl, err := kgo.NewClient(append(append([]kgo.Opt{kgo.SeedBrokers(c.addrs...)}, c.sec.ClientOpts...), opts...)...)
	if err != nil {
		c.t.Fatalf("kafka client: %v", err)
	}
	c.t.Cleanup(cl.Close)
	return cl
}

// Produce writes values to topic with keys from key (nil: no key) and waits
// for every ack.
func Produce(t testing.TB, cl *kgo.Client, topic string, values [][]byte, key func(i int) []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	errs := make(chan error, 1)
	for i, v := range values {
		r := &kgo.Record{Topic: topic, Value: v}
		if key != nil {
			r.Key = key(i)
		}
		cl.Produce(ctx, r, func(_ *kgo.Record, err error) {
			if err != nil {
				select {
				case errs <- err:
				default:
				}
			}
		})
	}
	if err := cl.Flush(ctx); err != nil {
		t.Fatalf("produce to %s: flush: %v", topic, err)
	}
	select {
	case err := <-errs:
		t.Fatalf("produce to %s: %v", topic, err)
	default:
	}
}

// EndOffsets returns each partition's high watermark.
func EndOffsets(t testing.TB, cl *kgo.Client, topic string) map[int32]int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		t.Fatalf("end offsets of %s: %v", topic, err)
	}
	out := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) { out[o.Partition] = o.Offset })
	return out
}

// Committed returns the group's committed offset per partition of topic
// (absent: none).
func Committed(t testing.TB, cl *kgo.Client, group, topic string) map[int32]int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := kadm.NewClient(cl).FetchOffsets(ctx, group)
	if errors.Is(err, kerr.GroupIDNotFound) {
		return map[int32]int64{}
	}
	if err != nil {
		t.Fatalf("committed offsets of %s: %v", group, err)
	}
	out := map[int32]int64{}
	resp.Each(func(o kadm.OffsetResponse) {
		if o.Topic == topic && o.Err == nil && o.At >= 0 {
			out[o.Partition] = o.At
		}
	})
	return out
}

// ReadAll reads every record of topic up to its current end offsets.
func ReadAll(t testing.TB, c *Cluster, topic string) []*kgo.Record {
	t.Helper()
	admin := c.Client()
	ends := EndOffsets(t, admin, topic)
	var total int64
	start := map[string]map[int32]kgo.Offset{topic: {}}
	for p, e := range ends {
		total += e
		start[topic][p] = kgo.NewOffset().AtStart()
	}
	if total == 0 {
		return nil
	}
	cl := c.Client(kgo.ConsumePartitions(start), kgo.FetchMaxBytes(64<<20))
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	var out []*kgo.Record
	seen := map[int32]int64{}
	done := func() bool {
		for p, e := range ends {
			if seen[p] < e {
				return false
			}
		}
		return true
	}
	for !done() {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %s: %d records before the deadline, want offsets %v", topic, len(out), ends)
		}
		fs.EachRecord(func(r *kgo.Record) {
			if r.Offset < ends[r.Partition] {
				out = append(out, r)
			}
			seen[r.Partition] = r.Offset + 1
		})
	}
	return out
}
