package main

import (
	"context"
	"fmt"
	"math"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// Payload sizes of the scenarios.
const (
	KiB = 1 << 10
	MiB = 1 << 20
)

// family is a kind of scenario; each runs at several payload sizes.
type family struct {
	name string
	// needs are the runner kinds the scenario uses, as "MV_SOURCE=udsource".
	needs []string
	sizes []int
	// baseline and peer name what the runner is compared with ("" for none).
	baseline, peer string
	// sequential names a second baseline that keeps Numaflow's one-stream,
	// one-batch-at-a-time contract ("" for none).
	sequential string
	what       string
	// warmBroker: before the rounds, the last side (the bare client) runs
	// once unmeasured, so the broker process the sides share (kfake,
	// nats-server) has grown its memory before any side is measured:
	// otherwise the first side alone pays for faulting it in (the first
	// round's runner on JetStream at 1 MiB moved 24-49 msgs/s, the later
	// rounds' 146-179).
	warmBroker bool
	// halfRate: after the rounds, the runner runs once more with
	// MV_RATE_LIMIT_MAX at half its median rate, for its latency there
	// (--half-rate).
	halfRate bool
	// sides sets up what the scenario shares (a function process) and
	// returns its sides in the order they run each round.
	sides func(h *harness, sc scenario, rec *record) ([]side, func(), error)
}

// side is one measured party of a scenario: "runner", "baseline", "peer"
// (or "pump"). run starts what it needs, measures, and stops it again.
type side struct {
	role string
	run  func(ctx context.Context, sc scenario) (sideResult, error)
}

// scenario is one family at one payload size.
type scenario struct {
	*family
	size int
	// profile is set in the round that saves CPU profiles (the first).
	profile bool
	// env is added to the runner's environment (the half-rate pass's
	// rate limit).
	env map[string]string
}

func (s scenario) id() string { return s.name + "/" + sizeName(s.size) }

func (s scenario) describe() string {
	d := s.what
	if s.baseline != "" {
		d += "; baseline: " + s.baseline
	}
	if s.sequential != "" {
		d += "; sequential baseline: " + s.sequential
	}
	if s.peer != "" {
		d += "; peer: " + s.peer
	}
	return d
}

// batchFor is the read batch size for a payload: 500 (the runner's default)
// for small messages, fewer for large ones so a batch stays near 8 MiB, as
// an operator would set MV_READ_BATCH_SIZE for 1 MiB messages.
func batchFor(size int) int {
	switch {
	case size <= 4*KiB:
		return 500
	case size <= 64*KiB:
		return 128
	default:
		return 8
	}
}

// inflight is MV_INFLIGHT_BATCHES for every scenario (the runner's default).
const inflight = 4

// The two bare gRPC clients of the Unix-socket scenarios.
const (
	concurrentGRPC = "bare gRPC client, concurrent (one sink and transformer stream per in-flight batch, batches overlapped)"
	sequentialGRPC = "bare gRPC client, sequential (one stream per container, one batch at a time: Numaflow's sink contract)"
)

func catalogue() []*family {
	return append([]*family{
		{
			name: "generator->blackhole", halfRate: true, sizes: []int{KiB, 64 * KiB, MiB},
			needs: []string{"MV_SOURCE=generator", "MV_SINK=blackhole"},
			peer:  "benthos generate->drop (against the runner building a payload per message, as generate makes one)",
			what:  "the engine's own cost per message: an unthrottled generator into a sink that drops",
			sides: (*harness).sidesGeneratorBlackhole,
		},
		{
			name: "udsource->udsink", halfRate: true, sizes: []int{KiB, 64 * KiB, MiB},
			needs:      []string{"MV_SOURCE=udsource", "MV_SINK=udsink"},
			baseline:   concurrentGRPC,
			sequential: sequentialGRPC,
			what:       "numaflow-go SDK source and sink servers on Unix sockets",
			sides:      (*harness).sidesUDS,
		},
		{
			name: "udsource->udtransformer->udsink", halfRate: true, sizes: []int{KiB, 64 * KiB, MiB},
			needs:      []string{"MV_SOURCE=udsource", "MV_TRANSFORMER=udtransformer", "MV_SINK=udsink"},
			baseline:   concurrentGRPC,
			sequential: sequentialGRPC,
			what:       "numaflow-go SDK source, source transformer and sink servers on Unix sockets",
			sides:      (*harness).sidesUDS,
		},
		{
			name: "generator->cloudevents->blackhole", halfRate: true, sizes: []int{KiB, MiB},
			needs:    []string{"MV_SOURCE=generator", "MV_TRANSFORMER=cloudevents", "MV_SINK=blackhole"},
			baseline: "bare sdk-go CloudEvents client",
			peer:     "benthos generate->http->drop (against the runner building a payload per message, as generate makes one)",
			what:     "an sdk-go CloudEvents function on loopback as the transformer",
			sides:    (*harness).sidesCloudEvents,
		},
		{
			name: "http->blackhole", sizes: []int{KiB, MiB},
			needs:    []string{"MV_SOURCE=http", "MV_SINK=blackhole"},
			baseline: "bare net/http server",
			peer:     "benthos http_server->drop",
			what:     "HTTP POSTs at a fixed concurrency, each answered after its ack; latency measured by the client",
			sides:    (*harness).sidesHTTPSource,
		},
		{
			name: "kafka->kafka", halfRate: true, warmBroker: true, sizes: []int{KiB, 64 * KiB},
			needs:    []string{"MV_SOURCE=kafka", "MV_SINK=kafka"},
			baseline: "bare franz-go loop (poll a batch, produce it, wait for the acks, commit)",
			what:     "a Kafka topic of 6 partitions into another on one kfake cluster (a separate process), in one consumer group",
			sides:    (*harness).sidesKafka,
		},
		{
			name: "jetstream->jetstream", halfRate: true, warmBroker: true, sizes: []int{KiB, 64 * KiB, MiB},
			needs:    []string{"MV_SOURCE=jetstream", "MV_SINK=jetstream"},
			baseline: "bare nats.go loop (fetch a batch, publish it, wait for the publish acks, ack with the last confirmed)",
			what:     "a JetStream work-queue stream into another on one nats-server (a separate process, max_payload 8 MiB, memory storage), kept 64 MiB ahead",
			sides:    (*harness).sidesJetStream,
		},
		{
			name: "uds-pump", sizes: []int{KiB, 64 * KiB, MiB},
			what:  "raw Unix-socket byte pump, one writer and one reader: the physical limit for large payloads",
			sides: (*harness).sidesPump,
		},
	}, append(append(inprocFamilies(), rateLimitFamilies()...), orderingFamilies()...)...)
}

func selectScenarios(fams []*family, filter *regexp.Regexp) []scenario {
	var out []scenario
	for _, f := range fams {
		for _, size := range f.sizes {
			sc := scenario{family: f, size: size}
			if filter == nil || filter.MatchString(sc.id()) {
				out = append(out, sc)
			}
		}
	}
	return out
}

func sizeName(n int) string {
	switch {
	case n >= MiB && n%MiB == 0:
		return fmt.Sprintf("%dMiB", n/MiB)
	case n >= KiB && n%KiB == 0:
		return fmt.Sprintf("%dKiB", n/KiB)
	}
	return fmt.Sprintf("%dB", n)
}

// record is one scenario's result, as --json writes it. Figures that do not
// apply to the scenario (no baseline, no peer, no runner) are null.
type record struct {
	Scenario           string   `json:"scenario"`
	PayloadBytes       int      `json:"payload_bytes"`
	MsgsPerSec         *float64 `json:"msgs_per_sec"`
	MBPerSec           *float64 `json:"mb_per_sec"` // MiB/s of payload
	Baseline           string   `json:"baseline"`
	BaselineMsgsPerSec *float64 `json:"baseline_msgs_per_sec"`
	RatioToBaseline    *float64 `json:"ratio_to_baseline"`
	Peer               string   `json:"peer"`
	PeerMsgsPerSec     *float64 `json:"peer_msgs_per_sec"`
	RatioToPeer        *float64 `json:"ratio_to_peer"`
	// The sequential bare client (Numaflow's one-stream sink contract),
	// for the Unix-socket scenarios; Baseline is then the concurrent one.
	SequentialBaseline   string   `json:"sequential_baseline,omitempty"`
	SequentialMsgsPerSec *float64 `json:"sequential_baseline_msgs_per_sec"`
	RatioToSequential    *float64 `json:"ratio_to_sequential_baseline"`
	PeakRSSMB            *float64 `json:"peak_rss_mb"` // MiB, VmHWM of the runner
	// RunnerGCsPerSec is how many garbage collections the runner ran per
	// second in the window (median over the rounds), from its
	// go_gc_duration_seconds summary: what the collector pacing trades
	// for peak RSS.
	RunnerGCsPerSec *float64 `json:"runner_gcs_per_sec,omitempty"`
	// The rate limit scenarios: MV_RATE_LIMIT_MAX, the read rate over it,
	// and how many runner processes shared it.
	RateLimitMsgsPerSec *float64 `json:"rate_limit_msgs_per_sec,omitempty"`
	RatioToLimit        *float64 `json:"ratio_to_limit,omitempty"`
	Replicas            int      `json:"replicas,omitempty"`
	P50MS               *float64 `json:"p50_ms"`
	P99MS               *float64 `json:"p99_ms"`
	// The runner once more with MV_RATE_LIMIT_MAX at half its median
	// rate (HalfRateLimit): the rate it read at and its latency there
	// (the same source as P50MS), so latency is seen away from
	// saturation, where queues build.
	HalfRateLimit      *float64 `json:"half_rate_limit_msgs_per_sec,omitempty"`
	HalfRateMsgsPerSec *float64 `json:"half_rate_msgs_per_sec,omitempty"`
	HalfRateP50MS      *float64 `json:"half_rate_p50_ms,omitempty"`
	HalfRateP99MS      *float64 `json:"half_rate_p99_ms,omitempty"`
	// The generator scenarios with a Benthos peer run the runner a second
	// way, building a payload per message (MV_GENERATOR_FIXED_PAYLOAD=
	// false) as Benthos generate makes one per message: RatioToPeer is
	// from this side, so both do the same work. MsgsPerSec stays the
	// shared payload's (the engine's own cost).
	SameWorkMsgsPerSec  *float64 `json:"runner_payload_per_msg_msgs_per_sec,omitempty"`
	SameWorkCPUUsPerMsg *float64 `json:"runner_payload_per_msg_cpu_us_per_msg,omitempty"`

	// Context for reading the figures.
	BatchSize       int      `json:"batch_size,omitempty"`
	InflightBatches int      `json:"inflight_batches,omitempty"`
	Concurrency     int      `json:"concurrency,omitempty"`
	LatencySource   string   `json:"latency_source,omitempty"`
	RSSBoundMB      *float64 `json:"rss_bound_mb,omitempty"`
	PeerPeakRSSMB   *float64 `json:"peer_peak_rss_mb,omitempty"`
	// CPU time of each side's own process per message in the window, in µs
	// (SDK servers and functions shared by the sides not included).
	CPUUsPerMsg           *float64 `json:"cpu_us_per_msg,omitempty"`
	BaselineCPUUsPerMsg   *float64 `json:"baseline_cpu_us_per_msg,omitempty"`
	PeerCPUUsPerMsg       *float64 `json:"peer_cpu_us_per_msg,omitempty"`
	SequentialCPUUsPerMsg *float64 `json:"sequential_baseline_cpu_us_per_msg,omitempty"`
	// The same CPU time per MiB of payload, and the runner's CPU per MiB
	// over the sequential client's (below 1: the runner spends less).
	CPUUsPerMiB           *float64 `json:"cpu_us_per_mib,omitempty"`
	BaselineCPUUsPerMiB   *float64 `json:"baseline_cpu_us_per_mib,omitempty"`
	SequentialCPUUsPerMiB *float64 `json:"sequential_baseline_cpu_us_per_mib,omitempty"`
	CPURatioToSequential  *float64 `json:"cpu_ratio_to_sequential_baseline,omitempty"`
	// The runner side's CPU split: each process' CPU µs per message and
	// the cores it used (CPU seconds per second) in the window, by kind
	// (runner, udsource, udsink, udtransformer, function).
	ProcessCPUUsPerMsg map[string]float64 `json:"process_cpu_us_per_msg,omitempty"`
	ProcessCores       map[string]float64 `json:"process_cores,omitempty"`
	// CPUs is --cpus for this record (0: Go's default); with several
	// (--cpus 1,2 or --sweep) MBPerSecByCPUs holds the scenario's MiB/s at
	// each, and CoreScaling the last over the first.
	CPUs           int                  `json:"cpus,omitempty"`
	RunnerProcs    int                  `json:"runner_gomaxprocs,omitempty"` // --runner-gomaxprocs (0: as the others)
	MBPerSecByCPUs map[string]float64   `json:"mb_per_sec_by_cpus,omitempty"`
	CoreScaling    *float64             `json:"core_scaling,omitempty"`
	Targets        []target             `json:"targets,omitempty"`
	Rounds         int                  `json:"rounds,omitempty"`
	RoundRates     map[string][]float64 `json:"round_rates,omitempty"` // msgs/s of each round, by side
	Skipped        string               `json:"skipped,omitempty"`
	Notes          []string             `json:"notes,omitempty"`
	Errors         []string             `json:"errors,omitempty"`
	LoadAverage    string               `json:"load_average"`
}

// target is one figure an issue aims at, and whether this run met it:
// What reads "<json field> <op> <bound>", Figure is that field's value
// in this record (null when it was not measured, which is a miss), and
// Result is "ok" or "MISS", so a run can be checked mechanically.
type target struct {
	What   string   `json:"what"`
	Met    bool     `json:"met"`
	Field  string   `json:"field"`
	Figure *float64 `json:"figure"`
	Op     string   `json:"op"` // "<=", ">=" (or a range)
	Bound  float64  `json:"bound"`
	Result string   `json:"result"`
	Issue  int      `json:"issue,omitempty"`
}

// num returns a pointer for a measured figure, nil for NaN (not measured).
func num(v float64) *float64 {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return nil
	}
	return &v
}

func (h *harness) runScenario(ctx context.Context, sc scenario) *record {
	rec := &record{Scenario: sc.name, PayloadBytes: sc.size, Baseline: sc.baseline, SequentialBaseline: sc.sequential, Peer: sc.peer, LoadAverage: loadavg(), Rounds: h.rounds}
	if missing := h.missingKinds(sc.needs); len(missing) > 0 {
		rec.Skipped = "not in this runner yet: " + strings.Join(missing, ", ")
		return rec
	}
	sides, cleanup, err := sc.sides(h, sc, rec)
	if err != nil {
		rec.Errors = append(rec.Errors, "setup: "+err.Error())
		return rec
	}
	defer cleanup()
	// Rounds interleave the sides, so drift on a shared machine (another
	// build starting) weighs on each side alike; each figure is the median.
	results := map[string][]sideResult{}
	failed := map[string]bool{}
	rec.RoundRates = map[string][]float64{}
	if sc.warmBroker && len(sides) > 0 && ctx.Err() == nil {
		warm := sides[len(sides)-1]
		if _, err := warm.run(ctx, sc); err != nil {
			rec.Errors = append(rec.Errors, "warm-up ("+warm.role+"): "+err.Error())
		}
	}
	for round := range h.rounds {
		sc.profile = round == 0 && h.profileDir != ""
		for _, s := range sides {
			if ctx.Err() != nil {
				return rec
			}
			r, err := s.run(ctx, sc)
			if err != nil {
				if !failed[s.role] {
					rec.Errors = append(rec.Errors, s.role+": "+err.Error())
				}
				failed[s.role] = true
				continue
			}
			results[s.role] = append(results[s.role], r)
			rec.RoundRates[s.role] = append(rec.RoundRates[s.role], math.Round(r.rate))
		}
	}
	fillRecord(rec, results)
	if sc.halfRate && h.halfRate && rec.MsgsPerSec != nil && ctx.Err() == nil {
		h.runHalfRate(ctx, sc, rec, sides)
	}
	return rec
}

// runHalfRate runs the runner side once more with MV_RATE_LIMIT_MAX at half
// the rate it reached, and records its rate and latency there. The limit
// counts whole read batches (as Numaflow's), so it is rounded down to
// them, at least one batch a second.
func (h *harness) runHalfRate(ctx context.Context, sc scenario, rec *record, sides []side) {
	for _, s := range sides {
		if s.role != "runner" {
			continue
		}
		batch := max(rec.BatchSize, 1)
		limit := max(int(*rec.MsgsPerSec/2)/batch, 1) * batch
		sc.env = map[string]string{"MV_RATE_LIMIT_MAX": strconv.Itoa(limit), "MV_RATE_LIMIT_RAMP_UP": "1s"}
		sc.profile = false
		r, err := s.run(ctx, sc)
		if err != nil {
			rec.Errors = append(rec.Errors, "runner at half rate: "+err.Error())
			return
		}
		rec.HalfRateLimit = num(float64(limit))
		rec.HalfRateMsgsPerSec = num(r.rate)
		rec.HalfRateP50MS, rec.HalfRateP99MS = num(r.p50), num(r.p99)
		return
	}
}

// fillRecord sets a record's figures from the rounds of each side, and the
// ratios between them.
func fillRecord(rec *record, results map[string][]sideResult) {
	for role, rs := range results {
		agg := aggregate(rs)
		switch role {
		case "runner", "pump":
			rec.MsgsPerSec = num(agg.rate)
			rec.PeakRSSMB = num(agg.rss)
			rec.RunnerGCsPerSec = num(agg.gcs)
			rec.P50MS = num(agg.p50)
			rec.P99MS = num(agg.p99)
			rec.CPUUsPerMsg = num(agg.cpu)
			rec.ProcessCPUUsPerMsg, rec.ProcessCores = agg.procs, agg.cores
			rec.Notes = append(rec.Notes, agg.notes...)
		case "baseline":
			rec.BaselineMsgsPerSec = num(agg.rate)
			rec.BaselineCPUUsPerMsg = num(agg.cpu)
		case "runner-copy":
			rec.SameWorkMsgsPerSec = num(agg.rate)
			rec.SameWorkCPUUsPerMsg = num(agg.cpu)
		case "sequential":
			rec.SequentialMsgsPerSec = num(agg.rate)
			rec.SequentialCPUUsPerMsg = num(agg.cpu)
		case "peer":
			rec.PeerMsgsPerSec = num(agg.rate)
			rec.PeerPeakRSSMB = num(agg.rss)
			rec.PeerCPUUsPerMsg = num(agg.cpu)
		}
		if role != "runner" && role != "runner-copy" && !math.IsNaN(agg.p50) {
			rec.Notes = append(rec.Notes, fmt.Sprintf("%s latency p50 %.2f ms, p99 %.2f ms", role, agg.p50, agg.p99))
		}
	}
	if rec.MsgsPerSec != nil {
		rec.MBPerSec = num(*rec.MsgsPerSec * float64(rec.PayloadBytes) / MiB)
	}
	if rec.MsgsPerSec != nil && rec.BaselineMsgsPerSec != nil && *rec.BaselineMsgsPerSec > 0 {
		rec.RatioToBaseline = num(*rec.MsgsPerSec / *rec.BaselineMsgsPerSec)
	}
	if rec.MsgsPerSec != nil && rec.SequentialMsgsPerSec != nil && *rec.SequentialMsgsPerSec > 0 {
		rec.RatioToSequential = num(*rec.MsgsPerSec / *rec.SequentialMsgsPerSec)
	}
	if same := rec.MsgsPerSec; same != nil && rec.PeerMsgsPerSec != nil && *rec.PeerMsgsPerSec > 0 {
		if _, copies := results["runner-copy"]; copies {
			// Against the peer only the side that does its work.
			same = rec.SameWorkMsgsPerSec
		}
		if same != nil {
			rec.RatioToPeer = num(*same / *rec.PeerMsgsPerSec)
		}
		if same != nil && same == rec.SameWorkMsgsPerSec {
			rec.Notes = append(rec.Notes, fmt.Sprintf("x peer: the runner building a payload per message, %s msgs/s (%s µs/msg), against the peer", fmtRate(same), fmtCPU(rec.SameWorkCPUUsPerMsg)))
		}
	}
	if rec.SequentialBaseline != "" && rec.PayloadBytes > 0 {
		rec.CPUUsPerMiB = perMiB(rec.CPUUsPerMsg, rec.PayloadBytes)
		rec.BaselineCPUUsPerMiB = perMiB(rec.BaselineCPUUsPerMsg, rec.PayloadBytes)
		rec.SequentialCPUUsPerMiB = perMiB(rec.SequentialCPUUsPerMsg, rec.PayloadBytes)
		if rec.CPUUsPerMiB != nil && rec.SequentialCPUUsPerMiB != nil && *rec.SequentialCPUUsPerMiB > 0 {
			rec.CPURatioToSequential = num(*rec.CPUUsPerMiB / *rec.SequentialCPUUsPerMiB)
		}
	}
	if rec.MsgsPerSec != nil && rec.RateLimitMsgsPerSec != nil {
		rec.RatioToLimit = num(*rec.MsgsPerSec / *rec.RateLimitMsgsPerSec)
		rec.Notes = append(rec.Notes, fmt.Sprintf("read rate / MV_RATE_LIMIT_MAX = %.0f / %.0f = %.3f", *rec.MsgsPerSec, *rec.RateLimitMsgsPerSec, *rec.RatioToLimit))
	}
	rec.Targets = targets(rec)
}

// perMiB turns CPU µs per message into CPU µs per MiB of payload.
func perMiB(usPerMsg *float64, payload int) *float64 {
	if usPerMsg == nil {
		return nil
	}
	return num(*usPerMsg * MiB / float64(payload))
}

// aggregate combines the rounds of one side: the median rate and
// latencies, the highest peak RSS, every distinct note.
func aggregate(rs []sideResult) sideResult {
	var rates, p50s, p99s, cpus, gcs []float64
	out := nanResult()
	seen := map[string]bool{}
	for _, r := range rs {
		rates = append(rates, r.rate)
		if !math.IsNaN(r.p50) {
			p50s = append(p50s, r.p50)
		}
		if !math.IsNaN(r.p99) {
			p99s = append(p99s, r.p99)
		}
		if !math.IsNaN(r.cpu) {
			cpus = append(cpus, r.cpu)
		}
		if !math.IsNaN(r.gcs) {
			gcs = append(gcs, r.gcs)
		}
		if !math.IsNaN(r.rss) && (math.IsNaN(out.rss) || r.rss > out.rss) {
			out.rss = r.rss
		}
		for _, n := range r.notes {
			if !seen[n] {
				seen[n] = true
				out.notes = append(out.notes, n)
			}
		}
	}
	out.rate, out.p50, out.p99, out.cpu, out.gcs = median(rates), median(p50s), median(p99s), median(cpus), median(gcs)
	out.procs, out.cores = medianByKey(rs, func(r sideResult) map[string]float64 { return r.procs }), medianByKey(rs, func(r sideResult) map[string]float64 { return r.cores })
	return out
}

// medianByKey is the median over the rounds of each key of a per-process
// map (nil when no round has one).
func medianByKey(rs []sideResult, m func(sideResult) map[string]float64) map[string]float64 {
	all := map[string][]float64{}
	for _, r := range rs {
		for k, v := range m(r) {
			all[k] = append(all[k], v)
		}
	}
	if len(all) == 0 {
		return nil
	}
	out := map[string]float64{}
	for k, vs := range all {
		out[k] = math.Round(median(vs)*1000) / 1000
	}
	return out
}

// median of values (the mean of the middle two for an even count), NaN
// for none.
func median(values []float64) float64 {
	if len(values) == 0 {
		return math.NaN()
	}
	v := append([]float64(nil), values...)
	sort.Float64s(v)
	if n := len(v); n%2 == 1 {
		return v[n/2]
	} else {
		return (v[n/2-1] + v[n/2]) / 2
	}
}

// missingKinds lists the needed "VAR=kind" pairs the runner lacks.
func (h *harness) missingKinds(needs []string) []string {
	var missing []string
	for _, n := range needs {
		v, k, _ := strings.Cut(n, "=")
		if !h.kinds[v][k] {
			missing = append(missing, n)
		}
	}
	return missing
}

// judged sets Result from Met.
func (t target) judged() target {
	t.Result = "MISS"
	if t.Met {
		t.Result = "ok"
	}
	return t
}

// targets are the goals of issue 11 (and the rate limit's) that apply to
// a record.
func targets(r *record) []target {
	var out []target
	add := func(field string, got *float64, op string, bound float64) {
		t := target{What: fmt.Sprintf("%s %s %g", field, op, bound), Field: field, Figure: got, Op: op, Bound: bound, Issue: 11}
		if got != nil {
			t.Met = *got >= bound
			if op == "<=" {
				t.Met = *got <= bound
			}
		}
		out = append(out, t.judged())
	}
	switch r.Scenario {
	case "generator->blackhole":
		if r.PayloadBytes == MiB {
			add("ratio_to_peer", r.RatioToPeer, ">=", 2)
		}
	case "udsource->udsink", "udsource->udtransformer->udsink":
		if r.PayloadBytes == KiB || r.PayloadBytes == MiB {
			add("ratio_to_sequential_baseline", r.RatioToSequential, ">=", 1.5)
		}
		if r.PayloadBytes == MiB {
			bound := 400.0
			if r.Scenario == "udsource->udtransformer->udsink" {
				bound = 800
			}
			add("cpu_us_per_mib", r.CPUUsPerMiB, "<=", bound)
		}
	case "http->blackhole":
		if r.PayloadBytes == MiB {
			add("ratio_to_baseline", r.RatioToBaseline, ">=", 0.9)
		}
	case "generator->cloudevents->blackhole":
		if r.PayloadBytes == KiB {
			add("ratio_to_baseline", r.RatioToBaseline, ">=", 1.0)
		}
	case "ratelimit-memory-x1", "ratelimit-redis-x3":
		if r.RatioToLimit != nil {
			out = append(out, target{What: "read/max in 0.9..1.1", Met: *r.RatioToLimit >= 0.9 && *r.RatioToLimit <= 1.1,
				Field: "ratio_to_limit", Figure: r.RatioToLimit, Op: "in 0.9..1.1", Bound: 1}.judged())
		}
	}
	if r.PayloadBytes == MiB && r.RSSBoundMB != nil && r.Skipped == "" {
		add("peak_rss_mb", r.PeakRSSMB, "<=", *r.RSSBoundMB)
	}
	return out
}

// rssBound is issue 11's memory goal for a scenario: batch x payload x
// batches in flight + 64 MiB.
func rssBound(batch, size, inflight int) *float64 {
	return num(float64(batch*size*inflight)/MiB + 64)
}
