package cloudevents_test

import (
	"bufio"
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"net"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"

	httpsrc "github.com/monovertex/monovertex/adapters/source/http"
	"github.com/monovertex/monovertex/internal/cetest"
	"github.com/monovertex/monovertex/internal/testutil"
)

func ids(evs []event.Event) map[string]event.Event {
	m := map[string]event.Event{}
	for _, ev := range evs {
		m[ev.ID()] = ev
	}
	return m
}

// chainEnv is the runner's environment for the chain both runner tests
// use: the CloudEvents function at fnURL, the sink at sinkURL with an
// extension override, and the fallback sink at fallbackURL for what fails
// three retry steps; extra adds the source and the rest.
func chainEnv(fnURL, sinkURL, fallbackURL string, extra map[string]string) map[string]string {
	env := map[string]string{
		"MV_TRANSFORMER":       "cloudevents",
		"MV_TRANSFORMER_URL":   fnURL,
		"MV_SINK":              "cloudevents",
		"K_SINK":               sinkURL,
		"K_CE_OVERRIDES":       `{"extensions":{"team":"payments"}}`,
		"MV_FALLBACK_SINK":     "cloudevents",
		"MV_FALLBACK_SINK_URL": fallbackURL,
		"MV_ON_FAILURE":        "fallback",
		"MV_RETRY_STEPS":       "3",
	}
	maps.Copy(env, extra)
	return env
}

// TestRunnerHTTPSourceFunctionSink runs the runner binary: callers post to
// its $PORT, it calls a CloudEvents function and delivers to K_SINK (or the
// fallback sink), and each caller is answered after its message is final.
func TestRunnerHTTPSourceFunctionSink(t *testing.T) {
	fn := cetest.StartFunction(t, rules)
	sink := cetest.StartReceiver(t, nil)
	fallback := cetest.StartReceiver(t, nil)
	p := testutil.StartRunner(t, chainEnv(fn.URL, sink.URL, fallback.URL, map[string]string{
		"MV_NAME":              "in",
		"MV_SOURCE":            "http",
		"MV_CE_TYPE":           "com.example.test",
		"MV_HTTP_AUTH_TOKEN":   "tok",
		"MV_HTTP_MAX_BODY":     "4096",
		"MV_HTTP_BODY_TIMEOUT": "500ms",
		"MV_READ_TIMEOUT":      "50ms",
		"MV_SHUTDOWN_TIMEOUT":  "5s",
	}))
	p.WaitReady(90 * time.Second)
	url := p.PortURL + "/vertices/in"
	auth := []string{"Authorization", "Bearer tok"}

	type sent struct {
		id, kind string
		ch       <-chan answer
	}
	var all []sent
	for _, kind := range []string{"echo", "drop", "fan", "flaky", "bad", "garbage"} {
		for i := 0; i < 3; i++ {
			id := fmt.Sprintf("%s-%d", kind, i)
			h := append([]string{httpsrc.HeaderID, id, httpsrc.HeaderKeys, "k" + id, "Content-Type", "text/plain"}, auth...)
			all = append(all, sent{id, kind, sendAsync(url, kind+" payload", h...)})
		}
	}
	for _, s := range all {
		a := wait(t, s.ch)
		if a.Status != http.StatusOK || a.ID != s.id {
			t.Fatalf("%s: answer %+v, want 200", s.id, a)
		}
		// By the time the caller has its 200, the event is where it belongs.
		main, fb := ids(sink.Events()), ids(fallback.Events())
		switch s.kind {
		case "echo", "flaky":
			if _, ok := main[s.id]; !ok {
				t.Fatalf("%s answered 200 before the sink had it", s.id)
			}
		case "fan":
			for k := 0; k < 3; k++ {
				if _, ok := main[fmt.Sprintf("%s-%d", s.id, k)]; !ok {
					t.Fatalf("%s answered 200 before the sink had copy %d", s.id, k)
				}
			}
		case "bad", "garbage":
			if _, ok := fb[s.id]; !ok {
				t.Fatalf("%s answered 200 before the fallback sink had it", s.id)
			}
		case "drop":
			if _, ok := main[s.id]; ok {
				t.Fatalf("dropped %s reached the sink", s.id)
			}
		}
	}
	for _, ev := range append(sink.Events(), fallback.Events()...) {
		if ev.Extensions()["team"] != "payments" || ev.Source() != "/monovertex/in" || ev.Time().IsZero() {
			t.Fatalf("attributes missing on delivered event:\n%s", ev)
		}
	}
	if n, m := len(sink.Events()), len(fallback.Events()); n != 3*(1+1+3) || m != 6 {
		t.Fatalf("sink got %d events (want 15), fallback %d (want 6)", n, m)
	}
	for i := 0; i < 3; i++ {
		if c := fn.Calls(fmt.Sprintf("flaky-%d", i)); c != 2 {
			t.Fatalf("flaky-%d: %d calls, want 2 (503, then ok)", i, c)
		}
		if c := fn.Calls(fmt.Sprintf("bad-%d", i)); c != 1 {
			t.Fatalf("bad-%d: %d calls, want 1 (400 is not retried)", i, c)
		}
	}

	// Rejections at the door never reach the function.
	before := len(fn.Events())
	expectStatuses(t, url, []request{
		{"no token", "x", nil, http.StatusUnauthorized},
		{"oversize", strings.Repeat("x", 5000), auth, http.StatusRequestEntityTooLarge},
		{"invalid CloudEvent", `{"specversion":"1.0","id":"x"}`, append([]string{"Content-Type", "application/cloudevents+json"}, auth...), http.StatusBadRequest},
		{"bad keys header is fine, bad time is not", "x", append([]string{httpsrc.HeaderEventTime, "12:00"}, auth...), http.StatusBadRequest},
	})
	if status := stalledBody(t, strings.TrimPrefix(p.PortURL, "http://")); status != http.StatusRequestTimeout {
		t.Fatalf("stalled body: %d, want 408", status)
	}
	if len(fn.Events()) != before {
		t.Fatalf("rejected requests reached the function")
	}

	p.Stop(30 * time.Second)
	st := testutil.StopLine(t, p.Stderr.String())
	if st.Read != 18 || st.Acked != 18 || st.Nacked != 0 || st.Written != 15 || st.FallbackWritten != 6 || st.Dropped != 3 {
		t.Fatalf("runner totals %+v", st)
	}
}

// stalledBody promises a body, sends part of it and stalls; it returns the
// status the runner answers with.
func stalledBody(t *testing.T, addr string) int {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST / HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer tok\r\nContent-Length: 1000\r\n\r\npartial")
	_ = conn.SetReadDeadline(time.Now().Add(20 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer to a stalled body: %v", err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// byHash gives each generated message a fixed fate from its id.
func byHash(id string) string {
	h := fnv.New32a()
	h.Write([]byte(id))
	return []string{"drop", "fan", "flaky", "bad", "echo"}[h.Sum32()%5]
}

// TestRunnerGeneratorFunctionSink: a finite generator through a function
// answering by id (replies, 202, batches, 503-then-ok, 400) to the sink and
// fallback sink; the runner exits 0 at the end and every message is counted.
func TestRunnerGeneratorFunctionSink(t *testing.T) {
	fn := cetest.StartFunction(t, func(w http.ResponseWriter, r *http.Request, ev *event.Event, call int) {
		ev.SetData("text/plain", []byte(byHash(ev.ID())))
		rules(w, r, ev, call)
	})
	sink := cetest.StartReceiver(t, nil)
	fallback := cetest.StartReceiver(t, nil)
	const total = 300
	p := testutil.StartRunner(t, chainEnv(fn.URL, sink.URL, fallback.URL, map[string]string{
		"MV_NAME":                "gen",
		"MV_SOURCE":              "generator",
		"MV_GENERATOR_TOTAL":     strconv.Itoa(total),
		"MV_GENERATOR_RPU":       "3000",
		"MV_GENERATOR_KEY_COUNT": "3",
		"MV_CE_TYPE":             "com.example.gen",
		"MV_CE_SOURCE":           "https://example.com/gen",
		"MV_READ_BATCH_SIZE":     "50",
	}))
	if code := p.Wait(120 * time.Second); code != 0 {
		t.Fatalf("runner exited %d", code)
	}
	main, fb := ids(sink.Events()), ids(fallback.Events())
	want := map[string]int{}
	for seq := 0; seq < total; seq++ {
		id := "0-" + strconv.Itoa(seq)
		want[byHash(id)]++
		key := fmt.Sprintf("key-%d", seq%3)
		var got []event.Event
		switch byHash(id) {
		case "echo", "flaky":
			got = append(got, main[id])
		case "fan":
			for k := 0; k < 3; k++ {
				got = append(got, main[fmt.Sprintf("%s-%d", id, k)])
			}
		case "bad":
			got = append(got, fb[id])
		case "drop":
			if _, ok := main[id]; ok {
				t.Fatalf("dropped %s reached the sink", id)
			}
		}
		for _, ev := range got {
			if ev.ID() == "" {
				t.Fatalf("%s (%s) missing", id, byHash(id))
			}
			if ev.Extensions()["team"] != "payments" || ev.Extensions()["partitionkey"] != key ||
				ev.Source() != "https://example.com/gen" || ev.Time().IsZero() {
				t.Fatalf("%s: attributes:\n%s", id, ev)
			}
		}
		wantCalls := 1
		if byHash(id) == "flaky" {
			wantCalls = 2
		}
		if c := fn.Calls(id); c != wantCalls {
			t.Fatalf("%s (%s): %d function calls, want %d", id, byHash(id), c, wantCalls)
		}
	}
	if len(main) != want["echo"]+want["flaky"]+3*want["fan"] || len(fb) != want["bad"] {
		t.Fatalf("sink %d, fallback %d events; fates %v", len(main), len(fb), want)
	}
	st := testutil.StopLine(t, p.Stderr.String())
	if st.Read != total || st.Acked != total || int(st.Dropped) != want["drop"] || int(st.FallbackWritten) != want["bad"] {
		t.Fatalf("runner totals %+v, fates %v", st, want)
	}
}

// TestRunnerExampleFunction runs cmd/example-function as its own process
// between the runner and the sink, as `kn service create` would deploy it.
func TestRunnerExampleFunction(t *testing.T) {
	fnPort := testutil.FreePort(t)
	fnProc := testutil.Start(t, "example-function", testutil.Build(t, "./cmd/example-function"),
		map[string]string{"PORT": strconv.Itoa(fnPort), "UPPERCASE": "true"})
	fnURL := fmt.Sprintf("http://127.0.0.1:%d", fnPort)
	testutil.WaitFor(t, 60*time.Second, "example-function up", func() bool {
		resp, err := http.Get(fnURL + "/healthz")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil && resp.StatusCode == http.StatusOK
	})
	sink := cetest.StartReceiver(t, nil)
	p := testutil.StartRunner(t, map[string]string{
		"MV_SOURCE":          "http",
		"MV_TRANSFORMER":     "cloudevents",
		"MV_TRANSFORMER_URL": fnURL,
		"MV_SINK":            "cloudevents",
		"K_SINK":             sink.URL,
		"MV_READ_TIMEOUT":    "50ms",
	})
	p.WaitReady(90 * time.Second)
	for _, body := range []string{"hello", "drop", "fanout"} {
		if a := wait(t, sendAsync(p.PortURL, body, httpsrc.HeaderID, "ex-"+body)); a.Status != http.StatusOK {
			t.Fatalf("%s: %+v", body, a)
		}
	}
	evs := ids(sink.Events())
	if ev := evs["ex-hello"]; string(ev.Data()) != "HELLO" || ev.Extensions()["handledby"] != "example-function" {
		t.Fatalf("echo through the example function:\n%s", ev)
	}
	if _, ok := evs["ex-drop"]; ok {
		t.Fatalf("drop reached the sink")
	}
	for k := 0; k < 3; k++ {
		if ev := evs[fmt.Sprintf("ex-fanout-%d", k)]; string(ev.Data()) != "FANOUT" {
			t.Fatalf("fan-out copy %d:\n%s", k, ev)
		}
	}
	if len(evs) != 4 {
		t.Fatalf("sink got %d events, want 4", len(evs))
	}
	fnProc.Stop(30 * time.Second)
}

// TestRunnerShutdownAnswersWaitingCallers: a caller waiting on a message the
// sink holds gets 500 when the runner stops, so it can retry elsewhere.
func TestRunnerShutdownAnswersWaitingCallers(t *testing.T) {
	sink, _ := gatedReceiver(t)
	p := testutil.StartRunner(t, map[string]string{
		"MV_SOURCE":           "http",
		"MV_SINK":             "cloudevents",
		"K_SINK":              sink.URL,
		"MV_SHUTDOWN_TIMEOUT": "1s",
		"MV_READ_TIMEOUT":     "50ms",
	})
	p.WaitReady(90 * time.Second)
	ch := sendAsync(p.PortURL, "held", httpsrc.HeaderID, "gated-1")
	testutil.WaitFor(t, 30*time.Second, "the message read", func() bool {
		st, err := p.Status()
		return err == nil && st.Totals.Read == 1
	})
	p.Signal(syscall.SIGTERM)
	if a := wait(t, ch); a.Status != http.StatusInternalServerError {
		t.Fatalf("waiting caller got %+v, want 500", a)
	}
	code := p.Wait(30 * time.Second)
	t.Logf("runner exit code %d after its shutdown budget ran out", code)
}

// TestRunnerDropsClientsThatStallInTheHeaders: the $PORT server's header
// timeout (set by cmd/runner) disconnects a client that never finishes its
// request headers, so stalled callers cannot pile up.
func TestRunnerDropsClientsThatStallInTheHeaders(t *testing.T) {
	t.Parallel()
	sink := cetest.StartReceiver(t, nil)
	p := testutil.StartRunner(t, map[string]string{"MV_SOURCE": "http", "MV_SINK": "cloudevents", "K_SINK": sink.URL})
	p.WaitReady(90 * time.Second)
	conn, err := net.Dial("tcp", strings.TrimPrefix(p.PortURL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST / HTTP/1.1\r\nHost: x\r\nX-Numaflow-Id: slow")
	_ = conn.SetReadDeadline(time.Now().Add(60 * time.Second))
	start := time.Now()
	buf := make([]byte, 512)
	for {
		if _, err := conn.Read(buf); err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				t.Fatalf("connection with unfinished headers still open after %v", time.Since(start))
			}
			break // closed by the server, possibly after a 408
		}
	}
	if st, err := p.Status(); err != nil || st.Totals.Read != 0 {
		t.Fatalf("a request with unfinished headers was read: %+v %v", st.Totals, err)
	}
}
