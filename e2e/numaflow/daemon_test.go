package numaflow_test

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"io"
	"maps"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/emptypb"

	mvtxdaemon "github.com/monovertex/monovertex/e2e/numaflow/internal/nfdaemon"
	"github.com/monovertex/monovertex/internal/procstat"
	"github.com/monovertex/monovertex/internal/testutil"
	"github.com/monovertex/monovertex/runner"
)

// daemonClient is what Numaflow's UI server and CLI hold: the generated
// MonoVertexDaemonService client over TLS without verification
// (numaflow pkg/mvtxdaemon/client.NewGRPCClient), and an HTTPS client for
// the REST paths and the pod endpoints.
type daemonClient struct {
	grpc  mvtxdaemon.MonoVertexDaemonServiceClient
	https *http.Client
	base  string
}

func dialDaemon(t *testing.T, port int) *daemonClient {
	t.Helper()
	tlsCfg := &tls.Config{InsecureSkipVerify: true}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(tlsCfg)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return &daemonClient{
		grpc:  mvtxdaemon.NewMonoVertexDaemonServiceClient(cc),
		https: &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: tlsCfg}},
		base:  "https://" + addr,
	}
}

func (d *daemonClient) get(t *testing.T, path string) (int, []byte) {
	t.Helper()
	resp, err := d.https.Get(d.base + path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// getProto reads a REST path of the daemon into m, as Numaflow's REST
// client does (protojson).
func (d *daemonClient) getProto(t *testing.T, path string, m proto.Message) {
	t.Helper()
	code, b := d.get(t, path)
	if code != http.StatusOK {
		t.Fatalf("GET %s: %d %s", path, code, b)
	}
	if err := protojson.Unmarshal(b, m); err != nil {
		t.Fatalf("GET %s: %v in %s", path, err, b)
	}
}

// snapshot is what the daemon API answered between two reads of /status
// and /metrics that agree with each other, so all of it is of one moment.
type snapshot struct {
	status  runner.Status
	pending map[string]int64 // monovtx_pending{period} on /metrics
	rate    float64          // monovtx_processing_rate on /metrics
	metrics *mvtxdaemon.MonoVertexMetrics
	health  *mvtxdaemon.MonoVertexStatus
	errors  []*mvtxdaemon.ReplicaErrors
	runtime runner.RuntimeErrors
}

// scrape reads monovtx_pending{period} and monovtx_processing_rate.
func scrape(t *testing.T, admin string) (map[string]int64, float64) {
	t.Helper()
	fams, err := procstat.Scrape(admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	pending := map[string]int64{}
	for _, p := range []string{"1m", "5m", "15m", "default"} {
		if v, ok := procstat.Value(fams, "monovtx_pending", map[string]string{"period": p}); ok {
			pending[p] = int64(v)
		}
	}
	rate, _ := procstat.Value(fams, "monovtx_processing_rate", nil)
	return pending, rate
}

// sameMoment reads /metrics and /status, asks the daemon everything, and
// reads /status and /metrics again, until the two reads of each agree (the
// rates move at second boundaries, the pending averages at each pending
// sample): then the daemon's answers, taken between them, are of that
// moment. It tries at most 50 times.
func sameMoment(t *testing.T, p *testutil.Examples, d *daemonClient) snapshot {
	t.Helper()
	for try := 0; try < 50; try++ {
		// A deadline per try: under load one try may take seconds, and 50
		// of them must not share one budget.
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		pend1, rate1 := scrape(t, p.Runner.AdminURL)
		a, err := p.Runner.Status()
		if err != nil {
			t.Fatal(err)
		}
		m, err := d.grpc.GetMonoVertexMetrics(ctx, &emptypb.Empty{})
		if err != nil {
			t.Fatalf("GetMonoVertexMetrics: %v", err)
		}
		h, err := d.grpc.GetMonoVertexStatus(ctx, &emptypb.Empty{})
		if err != nil {
			t.Fatalf("GetMonoVertexStatus: %v", err)
		}
		e, err := d.grpc.GetMonoVertexErrors(ctx, &mvtxdaemon.GetMonoVertexErrorsRequest{MonoVertex: a.Name})
		if err != nil {
			t.Fatalf("GetMonoVertexErrors: %v", err)
		}
		var rt runner.RuntimeErrors
		if err := getJSON(p.Runner.AdminURL+"/runtime/errors", &rt); err != nil {
			t.Fatal(err)
		}
		b, err := p.Runner.Status()
		if err != nil {
			t.Fatal(err)
		}
		pend2, rate2 := scrape(t, p.Runner.AdminURL)
		if !maps.Equal(a.Rate, b.Rate) || !maps.Equal(a.PendingAverages, b.PendingAverages) || a.Health != b.Health ||
			!reflect.DeepEqual(a.Errors, b.Errors) || !maps.Equal(pend1, pend2) || rate1 != rate2 {
			continue
		}
		return snapshot{status: a, pending: pend1, rate: rate1, metrics: m.GetMetrics(), health: h.GetStatus(), errors: e.GetErrors(), runtime: rt}
	}
	t.Fatal("/status and /metrics never read the same twice in a row in 50 tries")
	return snapshot{}
}

func getJSON(url string, v any) error {
	resp, err := http.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return json.NewDecoder(resp.Body).Decode(v)
}

// checkAgainstStatus checks every value the daemon gave against /status and
// /metrics of the same moment.
func checkAgainstStatus(t *testing.T, s snapshot) {
	t.Helper()
	st := s.status
	m := s.metrics
	if m.GetMonoVertex() != st.Name {
		t.Errorf("metrics name %q, /status %q", m.GetMonoVertex(), st.Name)
	}
	// Rates: Numaflow's keys, "default" being the lookback.
	want := map[string]float64{"1m": st.Rate["1m"], "5m": st.Rate["5m"], "15m": st.Rate["15m"], "default": st.Rate["lookback"]}
	got := map[string]float64{}
	for k, v := range m.GetProcessingRates() {
		got[k] = v.GetValue()
	}
	if !maps.Equal(got, want) {
		t.Errorf("processingRates %v, /status %v", got, want)
	}
	if got["default"] != s.rate {
		t.Errorf("processingRates[default] %v, monovtx_processing_rate %v", got["default"], s.rate)
	}
	pend := map[string]int64{}
	for k, v := range m.GetPendings() {
		pend[k] = v.GetValue()
	}
	if !maps.Equal(pend, st.PendingAverages) || !maps.Equal(pend, s.pending) {
		t.Errorf("pendings %v, /status pending_averages %v, monovtx_pending %v", pend, st.PendingAverages, s.pending)
	}
	if s.health.GetStatus() != st.Health.Status || s.health.GetMessage() != st.Health.Message || s.health.GetCode() != st.Health.Code {
		t.Errorf("status %+v, /status health %+v", s.health, st.Health)
	}
	// Errors: one entry per replica with errors, each container error as
	// /status has it; /runtime/errors lists the same, in Unix seconds.
	if len(s.errors) != len(st.Errors) {
		t.Fatalf("%d replicas with errors, /status %d", len(s.errors), len(st.Errors))
	}
	for i, r := range s.errors {
		sr := st.Errors[i]
		if r.GetReplica() != sr.Replica || len(r.GetContainerErrors()) != len(sr.ContainerErrors) {
			t.Fatalf("replica %d: %s with %d errors, /status %s with %d", i, r.GetReplica(), len(r.GetContainerErrors()), sr.Replica, len(sr.ContainerErrors))
		}
		for j, c := range r.GetContainerErrors() {
			sc := sr.ContainerErrors[j]
			if c.GetContainer() != sc.Container || !c.GetTimestamp().AsTime().Equal(sc.Timestamp) || c.GetCode() != sc.Code ||
				c.GetMessage() != sc.Message || c.GetDetails() != sc.Details {
				t.Errorf("error %d of %s: %v, /status %+v", j, r.GetReplica(), c, sc)
			}
			rt := s.runtime.Data[j]
			if rt.Container != sc.Container || rt.Timestamp != sc.Timestamp.Unix() || rt.Code != sc.Code || rt.Message != sc.Message || rt.Details != sc.Details {
				t.Errorf("/runtime/errors %d: %+v, /status %+v", j, rt, sc)
			}
		}
	}
	if len(st.Errors) == 0 && len(s.runtime.Data) != 0 {
		t.Errorf("/runtime/errors lists %d errors, /status none", len(s.runtime.Data))
	}
}

// TestNumaflowsDaemonClientReadsARunner: Numaflow's MonoVertex daemon API,
// asked with the client generated from its proto over TLS as Numaflow's
// UI does, answers every value as /status and /metrics of the same moment
// have it: the rates per window, the pending averages, the health with its
// reason, and the containers' errors; the REST paths answer the same, and
// the pod endpoints numaflow-core serves (/sidecar-livez, /runtime/errors)
// tell when a user container panicked and went away.
func TestNumaflowsDaemonClientReadsARunner(t *testing.T) {
	p := testutil.NewExamples(t, "mvdm")
	p.StartSource(1_000_000, nil)
	transformer := p.Start("example-udtransformer", "./cmd/example-udtransformer", nil)
	p.StartSink("example-udsink", "sink.out", map[string]string{"EXAMPLE_FALLBACK_EVERY": "1000000007", "EXAMPLE_FAIL_EVERY": "0"})
	daemonPort := testutil.FreePort(t)
	p.StartRunner(p.RunnerEnv(map[string]string{
		"MV_NAME":            "daemon-demo",
		"MV_TRANSFORMER":     "udtransformer",
		"MV_DAEMON_PORT":     strconv.Itoa(daemonPort),
		"MV_READ_BATCH_SIZE": "100",
		// 1,000 messages a second against a million pending, with one
		// replica at most and a 1 s target: the backlog wants far more
		// replicas than the bound allows, Numaflow's "critical".
		"MV_RATE_LIMIT_MAX":       "1000",
		"MV_MAX_SCALE":            "1",
		"MV_SCALE_TARGET_SECONDS": "1",
	}))
	d := dialDaemon(t, daemonPort)

	// Wait until the rates and every pending average are there.
	testutil.WaitFor(t, 60*time.Second, "rates and the pending averages", func() bool {
		p.RunnerAlive()
		st, err := p.Runner.Status()
		return err == nil && st.Rate["1m"] > 0 && len(st.PendingAverages) == 4
	})
	s := sameMoment(t, p, d)
	checkAgainstStatus(t, s)
	if s.health.GetStatus() != "critical" || s.health.GetCode() != "D3" || !strings.Contains(s.health.GetMessage(), "MV_MAX_SCALE is 1") {
		t.Errorf("status %v, want critical D3 naming MV_MAX_SCALE", s.health)
	}
	if s.pending["default"] < 900_000 || len(s.errors) != 0 {
		t.Errorf("pending %v and %d replicas with errors, want about a million pending and none", s.pending, len(s.errors))
	}
	if code, body := d.get(t, "/sidecar-livez"); code != http.StatusNoContent {
		t.Errorf("/sidecar-livez on the daemon port: %d %s, want 204 while every container answers", code, body)
	}
	// The REST paths answer what gRPC answers.
	var rm mvtxdaemon.GetMonoVertexMetricsResponse
	d.getProto(t, "/api/v1/metrics", &rm)
	if rm.GetMetrics().GetMonoVertex() != "daemon-demo" || len(rm.GetMetrics().GetProcessingRates()) != 4 || len(rm.GetMetrics().GetPendings()) != 4 {
		t.Errorf("/api/v1/metrics: %v", rm.GetMetrics())
	}
	var rs mvtxdaemon.GetMonoVertexStatusResponse
	d.getProto(t, "/api/v1/status", &rs)
	if rs.GetStatus().GetCode() != "D3" {
		t.Errorf("/api/v1/status: %v, want D3", rs.GetStatus())
	}

	// The transformer goes, and the one that takes its place panics on its
	// first message: its error, with the SDK's stack, is what the daemon,
	// /status and /runtime/errors list, and /sidecar-livez answers 503
	// while it is away.
	transformer.Signal(syscall.SIGTERM)
	if code := transformer.Wait(20 * time.Second); code != 0 {
		t.Fatalf("the transformer exited with %d on SIGTERM", code)
	}
	p.Start("example-udtransformer-panics", "./cmd/example-udtransformer", map[string]string{"EXAMPLE_PANIC_AT": "1"})
	testutil.WaitFor(t, 60*time.Second, "the transformer's panic on /status", func() bool {
		p.RunnerAlive()
		st, err := p.Runner.Status()
		if err != nil || len(st.Errors) == 0 {
			return false
		}
		for _, c := range st.Errors[0].ContainerErrors {
			if c.Container == "transformer" && strings.Contains(c.Message, "EXAMPLE_PANIC_AT=1 reached") {
				return true
			}
		}
		return false
	})
	testutil.WaitFor(t, 30*time.Second, "/sidecar-livez to answer 503", func() bool {
		code, _ := testutil.Get(t, p.Runner.AdminURL+"/sidecar-livez")
		return code == http.StatusServiceUnavailable
	})
	_, body := testutil.Get(t, p.Runner.AdminURL+"/sidecar-livez")
	if !strings.Contains(string(body), "transformer") || strings.Contains(string(body), "udsink") {
		t.Errorf("/sidecar-livez says %q, want the transformer named and the sink not", body)
	}
	s = sameMoment(t, p, d)
	checkAgainstStatus(t, s)
	if len(s.errors) != 1 || s.errors[0].GetReplica() != "daemon-demo-mv-0" {
		t.Fatalf("errors %v, want this replica's, named daemon-demo-mv-0", s.errors)
	}
	var panicked *mvtxdaemon.ContainerError
	for _, c := range s.errors[0].GetContainerErrors() {
		if strings.Contains(c.GetMessage(), "EXAMPLE_PANIC_AT=1 reached") {
			panicked = c
		}
	}
	if panicked == nil || panicked.GetContainer() != "transformer" || panicked.GetCode() != "Internal error" ||
		!strings.Contains(panicked.GetMessage(), "UDF_EXECUTION_ERROR") || !strings.Contains(panicked.GetDetails(), "goroutine") {
		t.Errorf("the panic: %v, want the transformer's Internal error with UDF_EXECUTION_ERROR and the stack", panicked)
	}
	var re mvtxdaemon.GetMonoVertexErrorsResponse
	d.getProto(t, "/api/v1/mono-vertices/daemon-demo/errors", &re)
	if len(re.GetErrors()) != 1 || len(re.GetErrors()[0].GetContainerErrors()) < 1 {
		t.Errorf("/api/v1/mono-vertices/daemon-demo/errors: %v", re.GetErrors())
	}
	other, err := d.grpc.GetMonoVertexErrors(context.Background(), &mvtxdaemon.GetMonoVertexErrorsRequest{MonoVertex: "another"})
	if err != nil || len(other.GetErrors()) != 0 {
		t.Errorf("errors of another mono vertex: %v, %v; want none", other.GetErrors(), err)
	}
	t.Logf("daemon: rates %v, pendings %v, status %s %s; %d container errors, /sidecar-livez 503 with the transformer away",
		s.status.Rate, s.pending, s.health.GetCode(), s.health.GetStatus(), len(s.errors[0].GetContainerErrors()))
}
