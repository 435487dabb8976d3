package runner

import (
	"context"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/proto"
)

func TestContainerErrorsCountRepeatsAndStayBounded(t *testing.T) {
	c := NewContainerErrors()
	clock := time.Unix(1000, 0)
	c.now = func() time.Time { clock = clock.Add(time.Second); return clock }
	panicErr := ContainerError{Container: "udsink", Stage: "sink", Code: "Internal", Message: "UDF_EXECUTION_ERROR(udsink): boom",
		Details: "goroutine 1 [running]:", Reason: ReasonSinkRuntime}
	for range 5 {
		c.ReportContainerError(panicErr)
	}
	c.ReportContainerError(ContainerError{Container: "transformer", Code: "Unavailable", Message: "connection reset", Reason: ReasonTransformerRuntime})
	list := c.List()
	if len(list) != 2 {
		t.Fatalf("got %d entries, want 2 (repeats count up): %+v", len(list), list)
	}
	if list[0].Container != "transformer" || list[1].Count != 5 || list[1].Details != panicErr.Details ||
		!list[1].FirstSeen.Before(list[1].Timestamp) {
		t.Fatalf("entries %+v; want the newest first and the panic counted 5 times with its details and first/last seen", list)
	}
	if got := c.Critical(); got[ReasonSinkRuntime] != 5 || got[ReasonTransformerRuntime] != 1 || len(got) != 2 {
		t.Fatalf("critical counts %v", got)
	}

	// A flood of distinct messages keeps the ring bounded and drops the
	// entries seen least recently; a huge stack is clipped.
	c.ReportContainerError(panicErr) // the panic is now the most recent
	for i := range 100 {
		c.ReportContainerError(ContainerError{Container: "udf", Code: "Unknown", Message: "m" + strings.Repeat("x", i), Details: strings.Repeat("s", 1<<20)})
	}
	list = c.List()
	if len(list) != containerErrorCapacity {
		t.Fatalf("ring holds %d entries, want %d", len(list), containerErrorCapacity)
	}
	for _, e := range list {
		if e.Container != "udf" {
			t.Fatalf("entry %+v survived 100 newer distinct errors", e)
		}
		if len(e.Details) > maxErrorDetails+64 {
			t.Fatalf("details of %d bytes kept, want them clipped near %d", len(e.Details), maxErrorDetails)
		}
	}
	if c.Critical()[ReasonSinkRuntime] != 6 {
		t.Fatalf("evicting an entry must not forget its critical count: %v", c.Critical())
	}
}

func TestHistogramQuantileInterpolatesLikePromQL(t *testing.T) {
	b := func(upper float64, cum uint64) *dto.Bucket {
		return &dto.Bucket{UpperBound: proto.Float64(upper), CumulativeCount: proto.Uint64(cum)}
	}
	h := &dto.Histogram{SampleCount: proto.Uint64(100), Bucket: []*dto.Bucket{b(1, 50), b(2, 50), b(4, 100), b(math.Inf(1), 100)}}
	for _, tc := range []struct{ q, want float64 }{{0.5, 1}, {0.25, 0.5}, {0.99, 3.96}, {0.75, 3}} {
		if got := histogramQuantile(tc.q, h); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("q%.2f = %v, want %v", tc.q, got, tc.want)
		}
	}
	// Beyond the last finite bound: that bound, as PromQL answers.
	over := &dto.Histogram{SampleCount: proto.Uint64(10), Bucket: []*dto.Bucket{b(1, 5), b(math.Inf(1), 10)}}
	if got := histogramQuantile(0.99, over); got != 1 {
		t.Errorf("q0.99 past the last bucket = %v, want 1", got)
	}
	if got := histogramQuantile(0.5, &dto.Histogram{}); got != -1 {
		t.Errorf("empty histogram = %v, want -1", got)
	}
}

func TestHistoryKeepsFifteenMinutesOfRates(t *testing.T) {
	var h history
	at := time.Unix(0, 0)
	for i := range historySamples + 10 {
		at = at.Add(historyInterval)
		h.add(at, int64(i*10), int64(i*4), int64(i), 2)
	}
	s := h.samples()
	if len(s) != historySamples {
		t.Fatalf("%d samples kept, want %d", len(s), historySamples)
	}
	if s[0].Time >= s[len(s)-1].Time || s[len(s)-1].Time != at.UnixMilli() {
		t.Fatalf("samples not oldest first ending now: first %d last %d", s[0].Time, s[len(s)-1].Time)
	}
	if last := s[len(s)-1]; last.ReadRate != 5 || last.AckRate != 2 || last.DesiredReplicas != 2 {
		t.Fatalf("last sample %+v; want read 10/2s = 5/s, acked 4/2s = 2/s", last)
	}
}

// nothingSource reads nothing until ctx ends.
type nothingSource struct{}

func (nothingSource) Read(ctx context.Context, _ int, timeout time.Duration) ([]*Message, error) {
	select {
	case <-ctx.Done():
	case <-time.After(timeout):
	}
	return nil, nil
}
func (nothingSource) Ack(context.Context, []*Message) error { return nil }
func (nothingSource) Close(context.Context) error           { return nil }

type okSink struct{}

func (okSink) Write(_ context.Context, msgs []*Message) ([]WriteResult, error) {
	return OKResults(len(msgs)), nil
}
func (okSink) Close(context.Context) error { return nil }

func TestAdminServesThePageAndContainerErrors(t *testing.T) {
	reg := prometheus.NewRegistry()
	errs := NewContainerErrors()
	e, err := NewPipeline(Options{Name: "demo", Replica: 3, Registerer: reg, ContainerErrors: errs},
		Pipeline{Source: nothingSource{}, Sink: okSink{}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(e.AdminHandler(reg, false))
	defer srv.Close()
	get := func(path string) (*http.Response, string) {
		t.Helper()
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}

	// The page and its assets, with nothing from elsewhere.
	external := regexp.MustCompile(`(?i)(src|href)\s*=\s*["']?(https?:)?//|@import|url\(\s*["']?(https?:)?//`)
	for _, path := range []string{"/", "/style.css", "/app.js"} {
		resp, body := get(path)
		if resp.StatusCode != http.StatusOK || len(body) < 500 {
			t.Fatalf("GET %s: %s, %d bytes", path, resp.Status, len(body))
		}
		if m := external.FindString(body); m != "" {
			t.Errorf("%s refers to another origin: %q", path, m)
		}
		if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'self'") {
			t.Errorf("%s has CSP %q", path, csp)
		}
	}
	if _, body := get("/"); !strings.Contains(body, `<script src="app.js"`) || !strings.Contains(body, `lang="en"`) {
		t.Errorf("the page does not load its script or name its language")
	}

	// No errors yet: an empty list, as Numaflow's API answers.
	_, body := get("/status")
	if !strings.Contains(body, `"errors": []`) {
		t.Errorf("/status without errors lacks \"errors\": []:\n%s", body)
	}
	errs.ReportContainerError(ContainerError{Container: "udsink", Stage: "sink", Code: "Internal", Message: "UDF_EXECUTION_ERROR(udsink): boom",
		Details: "stack", Reason: ReasonSinkRuntime})
	errs.ReportContainerError(ContainerError{Container: "udsink", Stage: "sink", Code: "Internal", Message: "UDF_EXECUTION_ERROR(udsink): boom",
		Reason: ReasonSinkRuntime})
	_, body = get("/status")
	var st struct {
		Errors []struct {
			Replica         string `json:"replica"`
			ContainerErrors []struct {
				Container, Timestamp, Code, Message, Details, Stage string
				Count                                               int
			} `json:"containerErrors"`
		} `json:"errors"`
		Critical map[string]int  `json:"critical_errors"`
		Latency  []StageLatency  `json:"latency"`
		Build    BuildInfo       `json:"build"`
		Adapters []AdapterStatus `json:"adapters"`
	}
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		t.Fatal(err)
	}
	if len(st.Errors) != 1 || st.Errors[0].Replica != "demo-mv-3" || len(st.Errors[0].ContainerErrors) != 1 {
		t.Fatalf("/status errors = %+v", st.Errors)
	}
	ce := st.Errors[0].ContainerErrors[0]
	if ce.Container != "udsink" || ce.Code != "Internal" || ce.Message != "UDF_EXECUTION_ERROR(udsink): boom" || ce.Details != "stack" || ce.Count != 2 || ce.Stage != "sink" {
		t.Fatalf("container error %+v", ce)
	}
	if _, err := time.Parse(time.RFC3339Nano, ce.Timestamp); err != nil {
		t.Fatalf("timestamp %q is not RFC 3339 (Numaflow's JSON of a protobuf Timestamp): %v", ce.Timestamp, err)
	}
	if st.Critical[ReasonSinkRuntime] != 2 || st.Build.GoVersion == "" || len(st.Latency) == 0 || len(st.Adapters) != 2 {
		t.Fatalf("critical %v build %+v latency %d adapters %+v", st.Critical, st.Build, len(st.Latency), st.Adapters)
	}
	_, metrics := get("/metrics")
	want := `monovtx_critical_error_total{mvtx_name="demo",mvtx_replica="3",reason="sink_runtime_error"} 2`
	if !strings.Contains(metrics, want) {
		t.Fatalf("/metrics lacks %s", want)
	}
	resp, _ := get("/status/history")
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("/status/history content type %q", ct)
	}
}
