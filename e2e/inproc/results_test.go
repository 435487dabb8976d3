package inproc_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"

	"github.com/monovertex/monovertex/internal/testutil"
)

// receiver is a CloudEvents sink on loopback that records what it takes,
// by event ID, and holds events whose ID starts with "slow-" for hold.
type receiver struct {
	*httptest.Server
	hold time.Duration
	mu   sync.Mutex
	got  map[string]string // id -> data
}

func newReceiver(t *testing.T, hold time.Duration) *receiver {
	rc := &receiver{hold: hold, got: map[string]string{}}
	rc.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ev, err := cehttp.NewEventFromHTTPRequest(r)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if strings.HasPrefix(ev.ID(), "slow-") {
			time.Sleep(rc.hold)
		}
		rc.mu.Lock()
		rc.got[ev.ID()] = string(ev.Data())
		rc.mu.Unlock()
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(rc.Close)
	return rc
}

func (rc *receiver) data(id string) (string, bool) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	d, ok := rc.got[id]
	return d, ok
}

// answerExpr drops n%10 == 0, splits n%10 == 1 in two, and reshapes the
// rest.
const answerExpr = `data.n % 10 = 0 ? undefined :
data.n % 10 = 1 ? $map([1, 2], function($k) {{"type": "part", "source": "/results", "data": {"n": data.n, "part": $k}}}) :
{"type": "reshaped", "source": "/results", "data": {"n": data.n, "double": data.n * 2, "from": id}}`

// resultRunner starts the runner with the HTTP source in result mode,
// the JSONata transformer and the CloudEvents sink to rc.
func resultRunner(t *testing.T, rc *receiver, extra map[string]string) *testutil.Process {
	env := map[string]string{
		"MV_SOURCE": "http", "MV_HTTP_RESPONSE": "result", "MV_HTTP_BUFFER_SIZE": "4000", "MV_HTTP_MAX_CONNECTIONS": "4096",
		"MV_READ_BATCH_SIZE": "200", "MV_READ_TIMEOUT": "20ms",
		"MV_TRANSFORMER": "jsonata", "MV_JSONATA_EXPRESSION": answerExpr,
		"MV_SINK": "cloudevents", "K_SINK": rc.URL, "MV_CE_SINK_CONCURRENCY": "128",
	}
	for k, v := range extra {
		env[k] = v
	}
	p := testutil.StartRunner(t, env)
	p.WaitReady(60 * time.Second)
	return p
}

// post sends a binary CloudEvent with id and data {"n":n}.
func post(c *http.Client, url, id string, n int) (*http.Response, []byte, error) {
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(fmt.Sprintf(`{"n":%d}`, n)))
	if err != nil {
		return nil, nil, err
	}
	req.Header.Set("Ce-Specversion", "1.0")
	req.Header.Set("Ce-Id", id)
	req.Header.Set("Ce-Source", "/client")
	req.Header.Set("Ce-Type", "order")
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp, body, err
}

// TestResultModeAnswers2000ConcurrentRequestsWithTheirOwnResult: 2,000
// requests at once, each answered only after the sink took its outputs,
// with exactly its own outputs: the reshaped event as a binary CloudEvent,
// the two parts of a split as a CloudEvents batch, a drop as 204.
func TestResultModeAnswers2000ConcurrentRequestsWithTheirOwnResult(t *testing.T) {
	const n = 2000
	rc := newReceiver(t, 0)
	p := resultRunner(t, rc, nil)
	c := &http.Client{Timeout: 2 * time.Minute, Transport: &http.Transport{MaxIdleConnsPerHost: n}}
	start := make(chan struct{})
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			errs <- checkAnswer(c, p.PortURL, rc, i)
		})
	}
	close(start)
	wg.Wait()
	close(errs)
	var bad []string
	for err := range errs {
		if err != nil {
			bad = append(bad, err.Error())
		}
	}
	if len(bad) > 0 {
		t.Fatalf("%d of %d answers wrong, first: %s", len(bad), n, strings.Join(bad[:min(5, len(bad))], "\n"))
	}
	settle(t, p, n)
	p.Stop(30 * time.Second)
	t.Logf("%d concurrent requests, each answered with its own result after delivery", n)
}

// checkAnswer posts request i and checks its answer against what the
// expression makes of it, and that the receiver had every output before.
func checkAnswer(c *http.Client, url string, rc *receiver, i int) error {
	id := "r-" + strconv.Itoa(i)
	resp, body, err := post(c, url, id, i)
	if err != nil {
		return fmt.Errorf("%s: %v", id, err)
	}
	switch i % 10 {
	case 0:
		if resp.StatusCode != http.StatusNoContent || len(body) != 0 {
			return fmt.Errorf("%s (dropped): %s %q, want 204 without a body", id, resp.Status, body)
		}
		if _, ok := rc.data(id); ok {
			return fmt.Errorf("%s (dropped) reached the sink", id)
		}
	case 1:
		if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/cloudevents-batch+json" {
			return fmt.Errorf("%s (split): %s %s, want 200 and a CloudEvents batch", id, resp.Status, resp.Header.Get("Content-Type"))
		}
		var evs []struct {
			ID, Type string
			Data     json.RawMessage
		}
		if err := json.Unmarshal(body, &evs); err != nil || len(evs) != 2 {
			return fmt.Errorf("%s (split): batch %s (%v), want two events", id, body, err)
		}
		for k, ev := range evs {
			wantID, wantData := fmt.Sprintf("%s-%d", id, k), fmt.Sprintf(`{"n":%d,"part":%d}`, i, k+1)
			if ev.ID != wantID || ev.Type != "part" || string(ev.Data) != wantData {
				return fmt.Errorf("%s (split): event %d is %s %s %s, want %s part %s", id, k, ev.ID, ev.Type, ev.Data, wantID, wantData)
			}
			if d, ok := rc.data(wantID); !ok || d != wantData {
				return fmt.Errorf("%s answered before the sink had %s", id, wantID)
			}
		}
	default:
		want := fmt.Sprintf(`{"double":%d,"from":%q,"n":%d}`, 2*i, id, i)
		if resp.StatusCode != http.StatusOK || resp.Header.Get("Ce-Id") != id || resp.Header.Get("Ce-Type") != "reshaped" || !bytes.Equal(body, []byte(want)) {
			return fmt.Errorf("%s: %s ce-id %q ce-type %q body %s, want 200 %s reshaped %s", id, resp.Status, resp.Header.Get("Ce-Id"), resp.Header.Get("Ce-Type"), body, id, want)
		}
		if d, ok := rc.data(id); !ok || d != want {
			return fmt.Errorf("%s answered before the sink had it", id)
		}
	}
	return nil
}

// TestResultModeClientTimeoutLeavesNothingHalfDone: a caller that gives
// up while its message is being written does not stop the write: the
// sink gets it, the source acks it, and the answer no one takes is
// counted in monovtx_http_source_results_lost_total and logged.
func TestResultModeClientTimeoutLeavesNothingHalfDone(t *testing.T) {
	rc := newReceiver(t, 2*time.Second)
	p := resultRunner(t, rc, nil)
	c := &http.Client{Timeout: 300 * time.Millisecond}
	if _, _, err := post(c, p.PortURL, "slow-1", 5); err == nil {
		t.Fatal("the request was answered within 300ms; want the client to time out while the sink holds it")
	}
	settle(t, p, 1)
	if d, ok := rc.data("slow-1"); !ok || d != `{"double":10,"from":"slow-1","n":5}` {
		t.Fatalf("sink has %q (%v), want the reshaped event", d, ok)
	}
	testutil.WaitFor(t, 10*time.Second, "the lost answer counted", func() bool {
		_, body := testutil.Get(t, p.AdminURL+"/metrics")
		return strings.Contains(string(body), `monovtx_http_source_results_lost_total{mvtx_name="local",mvtx_replica="0"} 1`)
	})
	if !strings.Contains(p.Stderr.String(), "reached no caller") {
		t.Fatalf("no log line about the lost result:\n%s", testutil.Tail(p.Stderr.String(), 3000))
	}
	p.Stop(30 * time.Second)
}
