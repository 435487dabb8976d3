// Package cloudevents_test runs the CloudEvents flow end to end on loopback:
// HTTP source or generator -> CloudEvents function (a real sdk-go peer) ->
// CloudEvents sink (a real sdk-go receiver), first through the engine in
// this process, then through the runner binary.
package cloudevents_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	cesink "github.com/monovertex/monovertex/adapters/sink/cloudevents"
	httpsrc "github.com/monovertex/monovertex/adapters/source/http"
	cetransformer "github.com/monovertex/monovertex/adapters/transformer/cloudevents"
	"github.com/monovertex/monovertex/internal/testutil"
	"github.com/monovertex/monovertex/runner"
)

// pipeline is the engine with the HTTP source mounted on a loopback server.
type pipeline struct {
	URL    string
	Engine *runner.Engine
	Source *httpsrc.Source
	cancel context.CancelFunc
	done   chan error
}

type pipelineSpec struct {
	opts     runner.Options
	source   httpsrc.Config
	fnURL    string // empty: no transformer
	fn       func(*cetransformer.Config)
	sinkURL  string
	sink     func(*cesink.Config)
	fallback string // empty: no fallback sink
	paused   bool   // start with reading paused
}

func logger(t *testing.T) *zap.SugaredLogger {
	if testing.Verbose() {
		return zaptest.NewLogger(t, zaptest.Level(zap.InfoLevel)).Sugar()
	}
	return zap.NewNop().Sugar()
}

func startPipeline(t *testing.T, spec pipelineSpec) *pipeline {
	t.Helper()
	log := logger(t)
	mux := http.NewServeMux()
	srcCfg := spec.source
	if srcCfg.MaxBody == 0 {
		srcCfg.MaxBody = 1 << 20
	}
	if srcCfg.BufferSize == 0 {
		srcCfg.BufferSize = 1000
	}
	if srcCfg.BodyTimeout == 0 {
		srcCfg.BodyTimeout = 5 * time.Second
	}
	if srcCfg.MaxInflight == 0 {
		srcCfg.MaxInflight = 64 << 20
	}
	if srcCfg.MaxHeader == 0 {
		srcCfg.MaxHeader = 1 << 20
	}
	if srcCfg.MaxConns == 0 {
		srcCfg.MaxConns = 1024
	}
	// These pipelines carry CloudEvents end to end (MV_HTTP_CLOUDEVENTS'
	// default).
	srcCfg.CloudEvents = true
	src, err := httpsrc.New(srcCfg, runner.Env{Name: "in", Mux: mux, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	var tr runner.Transformer
	if spec.fnURL != "" {
		cfg := cetransformer.Config{URL: spec.fnURL, Mode: "binary", Concurrency: 32, Timeout: 5 * time.Second, MaxReply: 1 << 20}
		cfg.Type = "com.example.test"
		if spec.fn != nil {
			spec.fn(&cfg)
		}
		tr, err = cetransformer.New(cfg, "in", log)
		if err != nil {
			t.Fatal(err)
		}
	}
	sinkCfg := cesink.Config{Roles: runner.Roles[cesink.Target]{Sink: cesink.Target{URL: spec.sinkURL}, Fallback: cesink.Target{URL: spec.fallback}}, Mode: "binary", Concurrency: 32}
	sinkTimeout := 5 * time.Second
	sinkCfg.Timeout = &sinkTimeout
	sinkCfg.Type = "com.example.test"
	if spec.sink != nil {
		spec.sink(&sinkCfg)
	}
	sink, err := cesink.New(sinkCfg, runner.RoleSink, "in", log)
	if err != nil {
		t.Fatal(err)
	}
	var fb runner.Sink
	if spec.fallback != "" {
		if fb, err = cesink.New(sinkCfg, runner.RoleFallbackSink, "in", log); err != nil {
			t.Fatal(err)
		}
	}
	opts := spec.opts
	opts.Name = "in"
	opts.Logger = log
	if opts.BatchSize == 0 {
		opts.BatchSize = 100
	}
	if opts.ReadTimeout == 0 {
		opts.ReadTimeout = 50 * time.Millisecond
	}
	if opts.ShutdownTimeout == 0 {
		opts.ShutdownTimeout = 10 * time.Second
	}
	eng, err := runner.New(opts, src, tr, sink, fb)
	if err != nil {
		t.Fatal(err)
	}
	// Pausing before Run, not after: a read already waiting when a
	// running engine is paused would still take the next request.
	eng.SetPaused(spec.paused)
	srv := httptest.NewServer(mux)
	ctx, cancel := context.WithCancel(context.Background())
	p := &pipeline{URL: srv.URL, Engine: eng, Source: src, cancel: cancel, done: make(chan error, 1)}
	go func() { p.done <- eng.Run(ctx) }()
	t.Cleanup(func() {
		p.stop(t)
		srv.Close()
	})
	return p
}

// stop ends the engine and returns Run's error.
func (p *pipeline) stop(t *testing.T) error {
	t.Helper()
	p.cancel()
	select {
	case err := <-p.done:
		p.done <- err // later calls see it too
		return err
	case <-time.After(60 * time.Second):
		t.Fatalf("engine did not stop within 60s")
		return nil
	}
}

// answer is an HTTP source reply as the caller sees it.
type answer struct {
	Status int
	ID     string   `json:"id"`
	IDs    []string `json:"ids"`
	Error  string   `json:"error"`
	Err    error    `json:"-"`
}

// send posts body with headers (name, value pairs) and waits for the answer.
func send(ctx context.Context, client *http.Client, url, body string, headers ...string) answer {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		return answer{Err: err}
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := client.Do(req)
	if err != nil {
		return answer{Err: err}
	}
	defer resp.Body.Close()
	a := answer{Status: resp.StatusCode}
	b, _ := io.ReadAll(resp.Body)
	_ = json.Unmarshal(b, &a)
	return a
}

// sendAsync posts in the background.
func sendAsync(url, body string, headers ...string) <-chan answer {
	ch := make(chan answer, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		ch <- send(ctx, http.DefaultClient, url, body, headers...)
	}()
	return ch
}

func wait(t *testing.T, ch <-chan answer) answer {
	t.Helper()
	return testutil.Receive(t, ch, 60*time.Second, func(a answer) error { return a.Err })
}

func notYet(t *testing.T, ch <-chan answer, d time.Duration) {
	t.Helper()
	select {
	case a := <-ch:
		t.Fatalf("answered %d %+v too early", a.Status, a)
	case <-time.After(d):
	}
}

// request is one request and the status it must be answered with.
type request struct {
	name    string
	body    string
	headers []string // name, value, name, value...
	status  int
}

// expectStatuses posts each request to url and checks its answer's status.
func expectStatuses(t *testing.T, url string, reqs []request) {
	t.Helper()
	for _, r := range reqs {
		if a := wait(t, sendAsync(url, r.body, r.headers...)); a.Status != r.status {
			t.Errorf("%s: %+v, want %d", r.name, a, r.status)
		}
	}
}
