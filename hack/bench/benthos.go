package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/monovertex/monovertex/hack/bench/internal/wait"
)

// benthosHTTP is the http processor the CloudEvents peer calls the function
// with: binary-mode CloudEvents headers, one request per message.
type benthosHTTP struct {
	url     string
	threads int
}

// benthosGenerate is the peer of the generator scenarios: generate (the
// payload as a constant, the cheapest mapping Benthos has) -> optional http
// processor -> drop. The port placeholder is filled by runBenthos.
func benthosGenerate(size, batch int, httpProc *benthosHTTP) string {
	var b strings.Builder
	fmt.Fprintf(&b, "input:\n  generate:\n    interval: \"\"\n    batch_size: %d\n    mapping: 'root = \"%s\"'\n", batch, strings.Repeat("x", size))
	if httpProc != nil {
		// `concurrency` pipeline threads, each with one message: the same
		// number of requests in flight as the runner and the bare client.
		// (One batch of `concurrency` messages with parallel: true was 25%
		// slower here: each batch waits for its slowest request.)
		fmt.Fprintf(&b, `pipeline:
  threads: %d
  processors:
    - http:
        url: %q
        verb: POST
        headers:
          Content-Type: application/octet-stream
          ce-specversion: "1.0"
          ce-id: ${! counter() }
          ce-source: /monovertex/bench
          ce-type: dev.monovertex.bench
`, httpProc.threads, httpProc.url)
	}
	b.WriteString("output:\n  drop: {}\n")
	return b.String()
}

// benthosHTTPServer is the HTTP source's peer: http_server on the
// service-wide address (path /post), answering each request after drop
// acked it.
func benthosHTTPServer() string {
	return `input:
  http_server:
    path: /post
    allowed_verbs: [ POST ]
output:
  drop: {}
`
}

// runBenthos runs Benthos with the pipeline cfg. Without measure, the rate
// is output_sent per second from its /stats over the window; with measure,
// measure drives the load itself against the service address (Benthos'
// pid given for its CPU time) and returns the rate and CPU per message.
func (h *harness) runBenthos(ctx context.Context, sc scenario, pipeline string, measure func(base string, pid int) (rate, cpuPerMsg float64, err error)) (sideResult, error) {
	r := nanResult()
	port, err := freePort()
	if err != nil {
		return r, err
	}
	base := "http://127.0.0.1:" + strconv.Itoa(port)
	cfg := fmt.Sprintf("http:\n  enabled: true\n  address: 127.0.0.1:%d\n  debug_endpoints: true\nlogger:\n  level: WARN\nmetrics:\n  json_api: {}\n%s", port, pipeline)
	path := filepath.Join(h.work, sanitize("benthos-"+sc.id())+".yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		return r, err
	}
	p, err := h.start("benthos-"+sc.id(), h.benthosBin, []string{"-c", path}, nil, false)
	if err != nil {
		return r, err
	}
	defer p.stop(10 * time.Second)
	if err := waitUntil("Benthos to serve /ping", time.Minute, p, func() bool { return httpOK(base + "/ping") }); err != nil {
		return r, err
	}
	if measure != nil {
		// The load runs its own warm-up; the profile starts when it ends.
		profc := make(chan func() error, 1)
		go func() {
			if wait.Sleep(ctx, h.warmup) {
				profc <- h.startProfile(sc, "peer", base+"/debug/pprof/profile")
			} else {
				profc <- nil
			}
		}()
		rate, cpu, err := measure(base, p.cmd.Process.Pid)
		if prof := <-profc; prof != nil {
			prof()
		}
		if err != nil {
			return r, err
		}
		r.rate, r.cpu = rate, cpu
	} else {
		var sent []float64
		var at []time.Time
		w, err := h.measuredWindow(ctx, sc, "peer", base+"/debug/pprof/profile", []*proc{p}, func() error {
			c, t, err := benthosSent(ctx, base)
			sent, at = append(sent, c), append(at, t)
			return err
		})
		if err != nil {
			return r, err
		}
		w.profile()
		r.rate = (sent[1] - sent[0]) / at[1].Sub(at[0]).Seconds()
		r.cpu = w.cpu[0].perMsg(sent[1] - sent[0])
		if r.rate <= 0 {
			return nanResult(), fmt.Errorf("benthos sent nothing during the window\n%s", p.logTail(10))
		}
	}
	if rss, err := peakRSSMiB(p.cmd.Process.Pid); err == nil {
		r.rss = rss
	}
	if errs := benthosErrors(ctx, base); errs > 0 {
		return r, fmt.Errorf("benthos counted %v errors\n%s", errs, p.logTail(10))
	}
	return r, nil
}

// benthosStats reads Benthos' json_api metrics.
func benthosStats(ctx context.Context, base string) (map[string]json.RawMessage, error) {
	var m map[string]json.RawMessage
	if err := getJSON(ctx, base+"/stats", &m); err != nil {
		return nil, fmt.Errorf("benthos /stats: %w", err)
	}
	return m, nil
}

// benthosSent is the sum of Benthos' output_sent counters, and when it was read.
func benthosSent(ctx context.Context, base string) (float64, time.Time, error) {
	before := time.Now()
	m, err := benthosStats(ctx, base)
	at := before.Add(time.Since(before) / 2)
	if err != nil {
		return 0, at, err
	}
	return sumStat(m, "output_sent"), at, nil
}

func benthosErrors(ctx context.Context, base string) float64 {
	m, err := benthosStats(ctx, base)
	if err != nil {
		return 0
	}
	return sumStat(m, "processor_error") + sumStat(m, "output_error")
}

// sumStat adds the numeric json_api metrics called name, whatever labels
// follow the name.
func sumStat(m map[string]json.RawMessage, name string) float64 {
	var sum float64
	for k, raw := range m {
		if k != name && !strings.HasPrefix(k, name+"{") {
			continue
		}
		var v float64
		if json.Unmarshal(raw, &v) == nil {
			sum += v
		}
	}
	return sum
}
