package kafka

import (
	"testing"
	"time"

	"github.com/monovertex/monovertex/adapters/internal/adaptertest"
	"github.com/monovertex/monovertex/runner"
)

func TestTrackerCommitsOnlyTheAckedPrefix(t *testing.T) {
	tr := newPartTracker()
	for _, off := range []int64{10, 11, 13, 14} { // 12 is a gap (a transaction marker)
		if !tr.read(off, 0) {
			t.Fatalf("new offset %d not handed out", off)
		}
	}
	steps := []struct {
		ack  int64
		want int64 // -1: nothing to commit
	}{
		{11, -1}, // 10 still in flight
		{14, -1},
		{10, 12}, // 10 and 11 final; 13 in flight
		{13, 15}, // the gap at 12 does not hold anything back
	}
	for _, s := range steps {
		tr.ack(s.ack)
		off, _, ok := tr.toCommit()
		if !ok {
			off = -1
		}
		if off != s.want {
			t.Fatalf("after ack of %d: commit point %d, want %d", s.ack, off, s.want)
		}
	}
	if tr.held() != 0 || tr.inflight != 0 {
		t.Fatalf("held %d, in flight %d after every ack", tr.held(), tr.inflight)
	}
}

func TestTrackerRedeliversOnlyNacked(t *testing.T) {
	tr := newPartTracker()
	for off := int64(0); off < 5; off++ {
		tr.read(off, 0)
	}
	tr.ack(0)
	tr.ack(3)
	if !tr.nack(1) {
		t.Fatal("nack of an in-flight record refused")
	}
	// The seek back reads 1..4 again: only the nacked 1 is handed out.
	var again []int64
	for off := int64(0); off < 5; off++ {
		if tr.read(off, 0) {
			again = append(again, off)
		}
	}
	if len(again) != 1 || again[0] != 1 {
		t.Fatalf("after the seek back handed out %v, want [1]", again)
	}
	if off, _, _ := tr.toCommit(); off != 1 {
		t.Fatalf("commit point %d, want 1", off)
	}
}

func TestCommitCheckCatchesACommitBeyondUnacked(t *testing.T) {
	c := newCommitCheck()
	p0, other := tp{"a", 0}, tp{"b", 0}
	c.delivered(p0, 5)
	c.delivered(p0, 6)
	c.delivered(other, 1) // another topic's partition 0 is apart
	c.acked(p0, 5)
	if err := c.check(p0, 6); err != nil {
		t.Fatalf("commit at 6 with 5 acked: %v", err)
	}
	if err := c.check(p0, 7); err == nil {
		t.Fatal("commit at 7 with 6 unacked passed the check")
	}
	c.released(p0)
	if err := c.check(p0, 7); err != nil {
		t.Fatalf("after the partition was released: %v", err)
	}
	if commits, violations, _ := c.summary(); commits != 3 || violations != 1 {
		t.Fatalf("summary %d commits, %d violations; want 3, 1", commits, violations)
	}
}

func TestValidate(t *testing.T) {
	ok := testConfig("k:9092", "t")
	cases := []struct {
		name   string
		mutate func(*Config)
		want   string
	}{
		{"no brokers", func(c *Config) { c.Brokers = " " }, "MV_KAFKA_BROKERS"},
		{"broker without port", func(c *Config) { c.Brokers = "kafka" }, "MV_KAFKA_BROKERS"},
		{"port out of range", func(c *Config) { c.Brokers = "k:9092,k:70000" }, "MV_KAFKA_BROKERS"},
		{"no topic", func(c *Config) { c.Topic = "" }, "MV_KAFKA_TOPIC"},
		{"topic with a slash", func(c *Config) { c.Topic = "a/b" }, "MV_KAFKA_TOPIC"},
		{"two topics", func(c *Config) { c.Topic = "a, b" }, ""},
		{"isolation", func(c *Config) { c.Isolation = "committed" }, "MV_KAFKA_ISOLATION_LEVEL"},
		{"read uncommitted", func(c *Config) { c.Isolation = "read_uncommitted" }, ""},
		{"an empty topic in the list", func(c *Config) { c.Topic = "a,,b" }, "MV_KAFKA_TOPIC"},
		{"a topic twice", func(c *Config) { c.Topic = "a,b, a" }, "MV_KAFKA_TOPIC"},
		{"no group", func(c *Config) { c.Group = "" }, "MV_KAFKA_GROUP"},
		{"start offset", func(c *Config) { c.StartOffset = "newest" }, "MV_KAFKA_START_OFFSET"},
		{"commit interval", func(c *Config) { c.CommitInterval = 0 }, "MV_KAFKA_COMMIT_INTERVAL"},
		{"session timeout", func(c *Config) { c.SessionTimeout = 10 * time.Millisecond }, "MV_KAFKA_SESSION_TIMEOUT"},
		{"max held", func(c *Config) { c.MaxHeld = 0 }, "MV_KAFKA_MAX_HELD"},
		{"sasl without user", func(c *Config) { c.SASLMechanism = "SCRAM-SHA-512" }, "MV_KAFKA_SASL_USER"},
		{"user without sasl", func(c *Config) { c.SASL.User = "u" }, "MV_KAFKA_SASL_MECHANISM"},
		{"key without cert", func(c *Config) { c.TLSKeyFile = "/k" }, "MV_KAFKA_TLS_CERT_FILE"},
	}
	for _, tc := range cases {
		adaptertest.ValidateRow(t, tc.name, ok, runner.RoleSource, tc.mutate, tc.want)
	}
	adaptertest.WantConfigError(t, ok.Validate(runner.RoleSource), "")
}
