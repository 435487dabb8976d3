package kafka_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/monovertex/monovertex/internal/kafkatest"
	"github.com/monovertex/monovertex/internal/testutil"
)

// A topic deleted under a running runner and created again (kfake gives
// the new topic a new ID and drops the group's commits, as Kafka does):
// franz-go alone stalls on the old ID for good. The runner must say so in
// its log (one error line naming the topic), be not ready while the topic
// is missing, and then read every record of the new topic without a
// restart.
func TestTopicDeletedAndRecreatedIsReadAgain(t *testing.T) {
	const before, after = 1_000, 1_000
	c := kafkatest.Start(t, 1, map[string]int{"in": 3, "out": 3})
	cl := c.Client(kgo.ProducerLinger(5 * time.Millisecond))
	adm := kadm.NewClient(cl)
	kafkatest.Produce(t, cl, "in", values(0, before), key)
	r := testutil.StartRunner(t, runnerEnv(c, "recreate"))
	waitCommittedToEnd(t, cl, 90*time.Second)
	r.WaitReady(30 * time.Second)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if resp, err := adm.DeleteTopics(ctx, "in"); err != nil || resp.Error() != nil {
		t.Fatalf("delete topic in: %v %v", err, resp.Error())
	}
	// While the topic is missing the runner is not ready.
	testutil.WaitFor(t, 30*time.Second, "/readyz 503 while the topic is missing", func() bool {
		code, _ := testutil.Get(t, r.AdminURL+"/readyz")
		return code == http.StatusServiceUnavailable
	})
	code, body := testutil.Get(t, r.AdminURL+"/readyz")
	t.Logf("topic deleted: /readyz %d %s", code, strings.TrimSpace(string(body)))
	// Nothing to read is no lag to scale on: pending is unknown (-1).
	testutil.WaitFor(t, 10*time.Second, "pending unknown while the topic is missing", func() bool {
		st, err := r.Status()
		return err == nil && st.Pending == -1
	})

	if resp, err := adm.CreateTopic(ctx, 3, 1, nil, "in"); err != nil || resp.Err != nil {
		t.Fatalf("create topic in again: %v %v", err, resp.Err)
	}
	recreated := time.Now()
	// A fresh producer: franz-go's producer, like its consumer, stays on
	// the old topic's ID.
	kafkatest.Produce(t, c.Client(kgo.ProducerLinger(5*time.Millisecond)), "in", values(before, before+after), key)
	// The new topic's offsets start at 0 again: the group's commits reach
	// its ends only once the runner read all of it.
	waitCommittedToEnd(t, cl, 120*time.Second)
	took := time.Since(recreated)
	r.WaitReady(30 * time.Second)
	stop(t, r)
	noFailedCheck(t, r)
	checkCommits(t, r)
	dups := countOutput(t, c, before+after)

	var gone []string
	for _, line := range strings.Split(r.Stderr.String(), "\n") {
		if strings.Contains(line, `"level":"error"`) && strings.Contains(line, "kafka topic") {
			gone = append(gone, line)
		}
	}
	if len(gone) != 1 || !strings.Contains(gone[0], `"topic":"in"`) {
		t.Fatalf("want one error line naming topic in for the episode, got %d:\n%s", len(gone), strings.Join(gone, "\n"))
	}
	t.Logf("%d records of the recreated topic read %v after it was created (no restart); %d before it; 0 lost, %d duplicates; log: %.200s",
		after, took.Round(time.Millisecond), before, dups, gone[0])
}
