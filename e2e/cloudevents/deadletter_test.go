package cloudevents_test

import (
	"encoding/base64"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/monovertex/monovertex/internal/cetest"
)

// refusingReceiver answers each binary-mode event by its ce-id with
// refuse(id): a status and a body; it records the ids it took (2xx).
type refusingReceiver struct {
	*httptest.Server
	mu    sync.Mutex
	taken map[string]int
	seen  map[string]int
}

func startRefusingReceiver(t *testing.T, refuse func(id string) (int, string)) *refusingReceiver {
	r := &refusingReceiver{taken: map[string]int{}, seen: map[string]int{}}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		id := req.Header.Get("Ce-Id")
		status, body := refuse(id)
		r.mu.Lock()
		r.seen[id]++
		if status/100 == 2 {
			r.taken[id]++
		}
		r.mu.Unlock()
		w.WriteHeader(status)
		_, _ = w.Write([]byte(body))
	}))
	t.Cleanup(r.Close)
	return r
}

// TestRunnerDeadLetterExtensions runs the runner binary with a primary
// CloudEvents sink that refuses some events for good (400, 422 with a body
// longer than Knative keeps) and answers 503 to others until their retry
// steps are spent: the fallback sink receives exactly the refused events,
// once each, with knativeerrordest (the primary's URL), knativeerrorcode
// (its status) and knativeerrordata (the base64 of its body, cut to 1024
// characters) as Knative's dispatcher sets them on a dead letter.
func TestRunnerDeadLetterExtensions(t *testing.T) {
	long := strings.Repeat("0123456789abcdef", 64) // 1024 bytes
	refuse := func(id string) (int, string) {
		var i int
		fmt.Sscanf(id, "ev-%d", &i)
		switch i % 5 {
		case 0:
			return http.StatusBadRequest, "bad event " + id
		case 1:
			return http.StatusUnprocessableEntity, long
		case 2:
			return http.StatusServiceUnavailable, "busy"
		}
		return http.StatusAccepted, ""
	}
	primary := startRefusingReceiver(t, refuse)
	fallback := cetest.StartReceiver(t, nil)
	p := startHTTPRunner(t, "dl", map[string]string{
		"K_SINK":               primary.URL + "/ingress",
		"MV_FALLBACK_SINK":     "cloudevents",
		"MV_FALLBACK_SINK_URL": fallback.URL,
		"MV_ON_FAILURE":        "fallback",
		"MV_RETRY_STEPS":       "3",
		"MV_RETRY_INTERVAL":    "1ms",
	})
	const n = 30
	waitOK(t, sendEvents(p, "dl", 0, n))
	got := map[string]int{}
	for _, ev := range fallback.Events() {
		got[ev.ID()]++
		var i int
		fmt.Sscanf(ev.ID(), "ev-%d", &i)
		status, body := refuse(ev.ID())
		ext := ev.Extensions()
		if dest := fmt.Sprint(ext["knativeerrordest"]); dest != primary.URL+"/ingress" {
			t.Errorf("%s: knativeerrordest %q, want %q", ev.ID(), dest, primary.URL+"/ingress")
		}
		if code := fmt.Sprint(ext["knativeerrorcode"]); code != fmt.Sprint(status) {
			t.Errorf("%s: knativeerrorcode %q, want %d", ev.ID(), code, status)
		}
		want := base64.StdEncoding.EncodeToString([]byte(body))
		if len(want) > 1024 {
			want = want[:1024]
		}
		if data := fmt.Sprint(ext["knativeerrordata"]); data != want {
			t.Errorf("%s: knativeerrordata %q (%d characters), want %q (%d)", ev.ID(), data, len(data), want, len(want))
		}
		if string(ev.Data()) != "payload "+ev.ID() {
			t.Errorf("%s: data %q, want the original payload", ev.ID(), ev.Data())
		}
	}
	primary.mu.Lock()
	defer primary.mu.Unlock()
	refused, taken := 0, 0
	for i := 0; i < n; i++ {
		id := fmt.Sprintf("ev-%d", i)
		status, _ := refuse(id)
		if status/100 == 2 {
			taken++
			if got[id] != 0 || primary.taken[id] != 1 {
				t.Errorf("%s: taken %d times by the sink, %d by the fallback sink; want 1 and 0", id, primary.taken[id], got[id])
			}
			continue
		}
		refused++
		if got[id] != 1 {
			t.Errorf("%s (answered %d): %d times at the fallback sink, want 1", id, status, got[id])
		}
		if status == http.StatusServiceUnavailable && primary.seen[id] != 4 {
			t.Errorf("%s: offered %d times to the sink, want 4 (three retry steps)", id, primary.seen[id])
		}
	}
	if len(got) != refused {
		t.Errorf("fallback sink has %d distinct events, want the %d refused", len(got), refused)
	}
	t.Logf("%d events: %d taken by the sink, %d refused and dead-lettered with knativeerror* extensions", n, taken, len(got))
}
