// Package inproc_test runs the in-process stages (issue 43) end to end on
// the runner binary: the CESQL and Knative filter (MV_FILTER, MV_FILTERS),
// the JSONata transformer, and the HTTP source answering each request with
// its result (MV_HTTP_RESPONSE=result).
package inproc_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/monovertex/monovertex/internal/testutil"
	"github.com/monovertex/monovertex/runner"
)

// event is one CloudEvent of a structured batch.
type event struct {
	SpecVersion     string          `json:"specversion"`
	ID              string          `json:"id"`
	Source          string          `json:"source"`
	Type            string          `json:"type"`
	DataContentType string          `json:"datacontenttype,omitempty"`
	Region          string          `json:"region,omitempty"`
	Data            json.RawMessage `json:"data,omitempty"`
	DataBase64      string          `json:"data_base64,omitempty"`
}

// postBatches posts events to the runner's HTTP source as CloudEvents
// batches of size, workers at a time, each retried on 429 and 503 (the
// source's back-pressure) until it is answered 200, within 5 minutes.
func postBatches(t *testing.T, url string, events []event, size, workers int) {
	t.Helper()
	var batches [][]byte
	for i := 0; i < len(events); i += size {
		b, err := json.Marshal(events[i:min(i+size, len(events))])
		if err != nil {
			t.Fatal(err)
		}
		batches = append(batches, b)
	}
	next := make(chan []byte, len(batches))
	for _, b := range batches {
		next <- b
	}
	close(next)
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	c := &http.Client{Timeout: time.Minute}
	deadline := time.Now().Add(5 * time.Minute)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for b := range next {
				for {
					resp, err := c.Post(url, "application/cloudevents-batch+json", bytes.NewReader(b))
					if err != nil {
						errs <- err
						return
					}
					resp.Body.Close()
					if resp.StatusCode == http.StatusOK {
						break
					}
					if (resp.StatusCode != http.StatusTooManyRequests && resp.StatusCode != http.StatusServiceUnavailable) || time.Now().After(deadline) {
						errs <- fmt.Errorf("batch answered %s", resp.Status)
						return
					}
					time.Sleep(50 * time.Millisecond)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// written is one message as the log sink printed it in Numaflow's format.
type written struct {
	ID, Payload, Keys string
	Headers           map[string]string
}

// readLog parses the log sink's Numaflow-format lines on stdout
// ("Payload - p Keys - k EventTime - t Headers - h: v, ... ID - id"), by
// ID, failing on an ID written twice or a line of another shape.
func readLog(t *testing.T, stdout string) map[string]written {
	t.Helper()
	out := map[string]written{}
	for _, line := range strings.Split(strings.TrimSpace(stdout), "\n") {
		if line == "" {
			continue
		}
		var rec struct{ Message string }
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("stdout line %q: %v", line, err)
		}
		m := rec.Message
		payload, rest, ok1 := strings.Cut(strings.TrimPrefix(m, "Payload - "), " Keys - ")
		keys, rest, ok2 := strings.Cut(rest, " EventTime - ")
		_, rest, ok3 := strings.Cut(rest, " Headers - ")
		hdrs, id, ok4 := cutLast(rest, " ID - ")
		if !ok1 || !ok2 || !ok3 || !ok4 {
			t.Fatalf("stdout line not in Numaflow's log format: %q", m)
		}
		w := written{ID: id, Payload: payload, Keys: keys, Headers: map[string]string{}}
		for _, kv := range strings.Split(hdrs, ", ") {
			if k, v, ok := strings.Cut(kv, ": "); ok {
				w.Headers[k] = v
			}
		}
		if _, dup := out[id]; dup {
			t.Fatalf("%s written twice", id)
		}
		out[id] = w
	}
	return out
}

func cutLast(s, sep string) (before, after string, ok bool) {
	i := strings.LastIndex(s, sep)
	if i < 0 {
		return s, "", false
	}
	return s[:i], s[i+len(sep):], true
}

// compare fails with the first differences between got and want.
func compare(t *testing.T, got map[string]written, want map[string]written) {
	t.Helper()
	var diffs []string
	for id, w := range want {
		g, ok := got[id]
		switch {
		case !ok:
			diffs = append(diffs, fmt.Sprintf("%s: not written, want %+v", id, w))
		case g.Payload != w.Payload || g.Keys != w.Keys:
			diffs = append(diffs, fmt.Sprintf("%s: got payload %s keys %q, want %s keys %q", id, g.Payload, g.Keys, w.Payload, w.Keys))
		case !maps.Equal(g.Headers, w.Headers):
			diffs = append(diffs, fmt.Sprintf("%s: headers %v, want %v", id, g.Headers, w.Headers))
		}
	}
	for id := range got {
		if _, ok := want[id]; !ok {
			diffs = append(diffs, fmt.Sprintf("%s: written, want not", id))
		}
	}
	if len(diffs) > 0 {
		sort.Strings(diffs)
		t.Fatalf("%d of %d outputs differ (%d written), first: \n%s", len(diffs), len(want), len(got), strings.Join(diffs[:min(10, len(diffs))], "\n"))
	}
}

// settle waits until the runner acked every message it read and has read
// want, and returns its totals.
func settle(t *testing.T, p *testutil.Process, want int64) {
	t.Helper()
	testutil.WaitFor(t, 60*time.Second, fmt.Sprintf("%d messages read and acked", want), func() bool {
		st, err := p.Status()
		return err == nil && st.Totals.Read == want && st.Totals.Acked == want
	})
}

// throughLogSink runs events through a runner that reads them with the
// HTTP source (batches of 1,000, four at a time) and writes them to the
// log sink in Numaflow's format, with settings added: it waits until
// every event was read and acked, checks the totals with check (an error
// fails the test), stops the runner and compares what it wrote with want.
func throughLogSink(t *testing.T, settings map[string]string, events []event, want map[string]written, check func(runner.Totals) error) {
	t.Helper()
	env := map[string]string{
		"MV_SOURCE": "http", "MV_HTTP_BUFFER_SIZE": "4000", "MV_READ_BATCH_SIZE": "500", "MV_READ_TIMEOUT": "20ms",
		"MV_SINK": "log", "MV_LOG_FORMAT": "numaflow",
	}
	maps.Copy(env, settings)
	p := testutil.StartRunner(t, env)
	p.WaitReady(60 * time.Second)
	postBatches(t, p.PortURL, events, 1000, 4)
	settle(t, p, int64(len(events)))
	st, err := p.Status()
	if err != nil {
		t.Fatal(err)
	}
	if err := check(st.Totals); err != nil {
		t.Fatal(err)
	}
	p.Stop(30 * time.Second)
	compare(t, readLog(t, p.Stdout.String()), want)
}
