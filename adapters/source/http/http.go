// Package http is a source that takes messages over HTTP on the runner's
// $PORT (MV_SOURCE=http), like Numaflow's HTTP source, and answers each
// request only after its messages reached a final state, so the caller gets
// end-to-end at-least-once delivery: retry until 200.
//
// POST / or /vertices/<MV_NAME> with either
//
//   - a CloudEvent in binary or structured mode, or a batch
//     (application/cloudevents-batch+json): attributes map to the message as
//     cewire documents (id -> ID, partitionkey -> Keys, extensions -> Headers);
//   - any other body: the body is the value; X-Numaflow-Id sets the ID
//     (default: a UUID version 7, as Numaflow's), X-Numaflow-Event-Time the event time in epoch
//     milliseconds (default: now), X-Numaflow-Keys comma-separated keys; the
//     other request headers become message headers with lower-case names
//     (except credentials and hop-by-hop headers).
//
// Answers:
//
//	200 {"id": ...}   written by the sink or fallback sink, or dropped on purpose
//	500               failed (nacked) or the runner is shutting down: retry
//	503               MV_HTTP_MAX_INFLIGHT_BYTES of bodies are already held:
//	                  retry after the Retry-After seconds (1)
//	429               MV_HTTP_BUFFER_SIZE messages are already waiting: retry
//	                  after the Retry-After seconds (1)
//	409               a message with this id is already in flight
//	400               malformed CloudEvent, batch or header; or framing two
//	                  servers could read two ways (Content-Length with
//	                  Transfer-Encoding, a repeated or malformed
//	                  Content-Length, a coding other than chunked), and
//	                  the connection is closed (guard.go)
//	431               request head above MV_HTTP_MAX_HEADER_BYTES, or the
//	                  largest unfinished head when the heads of all
//	                  connections hold their shared budget (guard.go)
//	503 (connection)  MV_HTTP_MAX_CONNECTIONS connections are open
//	413               body above MV_HTTP_MAX_BODY (or a batch above the buffer)
//	408               the body did not arrive within MV_HTTP_BODY_TIMEOUT
//	401               MV_HTTP_AUTH_TOKEN is set and the request lacks
//	                  Authorization: Bearer <token>
//
// A caller that hangs up before its message was read takes it back: the
// message is dropped from the queue and its id is free again.
//
// With MV_HTTP_RESPONSE=result (Benthos' sync_response, Numaflow's
// Serving) a request is answered, still only after its messages were
// written and acked, with what the sink or the fallback sink wrote for
// them, after the transformer and map UDF: 204 when every output was
// dropped, one output of a one-message request as a binary CloudEvent
// (200), anything else as a CloudEvents batch (application/
// cloudevents-batch+json, 200). Outputs without source or type get
// MV_CE_SOURCE and MV_CE_TYPE. A caller that hangs up or times out once
// its messages were read leaves nothing half-done: they are written and
// acked, and the answer nobody takes is counted
// (monovtx_http_source_results_lost_total) and logged.
//
// Memory follows the bytes that arrived, not the bytes a header promises.
// The token, the route and Content-Length are checked before any body byte
// is read, and those answers close the connection instead of draining the
// body. A body buffer starts at Content-Length or 64 KiB, whichever is
// smaller (4 KiB without a length). From there the buffer doubles only as
// it fills, up to the declared length (or MV_HTTP_MAX_BODY), so it never
// holds more than twice what arrived: a caller that declares 64 MiB and
// sends 64 KiB holds 128 KiB, and a few such callers cannot spend the
// budget of everyone else (with a length, the steps are pooled buffers,
// each given back as the next takes over). Every buffer is charged to one
// budget shared by all connections, MV_HTTP_MAX_INFLIGHT_BYTES, from its
// first byte until the request is answered; a request that finds the
// budget spent waits up to a second for it, then gets 503 with
// Retry-After: 1, the answer CloudEvents senders and Knative's delivery
// retry with backoff (and honour Retry-After where enabled). The body
// becomes the message's value as it is (a plain body, or a binary-mode
// CloudEvent's data); decoding a structured CloudEvent or a batch briefly
// copies its data, so the source's peak is then about twice the budget.
//
// CloudEvents are taken strictly: a request with ce-id, ce-source or
// ce-type headers but no ce-specversion is a broken binary event, not a
// plain body, and is answered 400 (as a plain body it would get a random
// id, and a retry could never be told from the first try). An event id
// with leading or trailing white space is refused with 400: " sp" and "sp"
// would be different ids here but the same one to a sink that trims, so a
// batch holding both would be delivered twice under one id.
package http

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/monovertex/monovertex/adapters/internal/cewire"
	"github.com/monovertex/monovertex/runner"
)

func init() {
	runner.RegisterSource("http", func(_ context.Context, env runner.Env, cfg *Config) (runner.Source, error) {
		return New(*cfg, env)
	})
}

// request is one HTTP request waiting for its messages to become final.
type request struct {
	done      chan struct{} // closed when remaining reaches 0
	remaining int
	failed    bool
	reason    string // why it failed, for the caller
	// gone: the caller hung up after some of its messages were read;
	// they finish, but no one takes the answer.
	gone bool
}

type entryState uint8

const (
	queued entryState = iota
	read
	finished
)

// entry is one message of a request; it is the message's Offset.
type entry struct {
	msg *runner.Message
	// id is the message's ID as the request gave it. While the engine
	// holds the message, msg.ID may be the engine's (under
	// MV_MESSAGE_IDS=numaflow it names every message it processes), so the
	// source keys its bookkeeping and its reply on this.
	id    string
	req   *request
	state entryState
	// results are the events the sinks wrote for it, copied
	// (MV_HTTP_RESPONSE=result; see Results); noResult, that one of
	// them could not be made an event.
	results  []event.Event
	noResult bool
}

// Source is the HTTP source.
type Source struct {
	cfg  Config
	name string
	log  *zap.SugaredLogger
	auth []byte // "Bearer <token>", compared in constant time

	// budget bounds the body bytes held across all connections
	// (MV_HTTP_MAX_INFLIGHT_BYTES).
	budget *cewire.Budget
	// guard bounds connections and request heads below net/http
	// (GuardPort).
	guard *guard
	// admissionWait is admissionWait; a field so tests can lengthen it
	// where a loaded machine would otherwise make them race the clock.
	admissionWait time.Duration
	// offsetSuffix is "-<replica>" under MV_MESSAGE_IDS=numaflow: a
	// message's offset for Numaflow's IDs is its ID and this
	// (NumaflowOffset).
	offsetSuffix string

	// mapper makes the result events (MV_HTTP_RESPONSE=result), nil
	// in ack mode.
	mapper *cewire.Mapper
	// lost counts answers with results that no caller took
	// (monovtx_http_source_results_lost_total); lostLog bounds the log
	// lines about them.
	lost    prometheus.Counter
	nLost   atomic.Int64
	lostLog lostLog

	mu       sync.Mutex
	queue    []*entry          // accepted, not yet read
	inflight map[string]*entry // by ID: queued or read, not final
	closed   bool
	stopping bool          // the engine reads no more: answer new and queued requests at once
	wake     chan struct{} // a token when the queue may be non-empty
}

var (
	_ runner.Source            = (*Source)(nil)
	_ runner.Nacker            = (*Source)(nil)
	_ runner.PendingReader     = (*Source)(nil)
	_ runner.Readier           = (*Source)(nil)
	_ runner.NumaflowOffsetter = (*Source)(nil)
)

// New builds the source and mounts it on env.Mux.
func New(cfg Config, env runner.Env) (*Source, error) {
	if err := cfg.Validate(runner.RoleSource); err != nil {
		return nil, err
	}
	if env.Mux == nil {
		return nil, errors.New("http source: no $PORT server to mount on (runner.Env.Mux is nil)")
	}
	log := env.Logger
	if log == nil {
		log = zap.NewNop().Sugar()
	}
	s := &Source{
		cfg: cfg, name: env.Name, log: log,
		inflight: map[string]*entry{},
		wake:     make(chan struct{}, 1),
		budget:   cewire.NewBudget(cfg.MaxInflight),
		guard:    newGuard(cfg.MaxConns, cfg.MaxHeader, log),

		admissionWait: admissionWait,
	}
	if env.MessageIDs == runner.NumaflowIDs {
		// numaflow-core's HTTP source names a message by its ID but gives
		// it the offset <id>-<replica>, from which a transformer's or a
		// map's outputs are named (source/http.rs).
		s.offsetSuffix = "-" + strconv.Itoa(env.Replica)
	}
	if token := strings.TrimSpace(cfg.AuthToken); token != "" {
		s.auth = []byte("Bearer " + token)
	}
	if cfg.Response == ResponseResult {
		mapper, err := cewire.New(cfg.Config, env.Name, log)
		if err != nil {
			return nil, err
		}
		s.mapper = mapper
		s.lost = prometheus.NewCounter(prometheus.CounterOpts{
			Name:        "monovtx_http_source_results_lost_total",
			Help:        "Requests whose messages were written and acked but whose result (MV_HTTP_RESPONSE=result) no caller took: it hung up or timed out first.",
			ConstLabels: prometheus.Labels{runner.LabelName: env.Name, runner.LabelReplica: strconv.Itoa(env.Replica)},
		})
		if env.Metrics != nil {
			if err := env.Metrics.Register(s.lost); err != nil {
				return nil, fmt.Errorf("http source: register monovtx_http_source_results_lost_total: %w", err)
			}
		}
	}
	env.Mux.Handle("POST /{$}", s)
	env.Mux.Handle("POST /vertices/{vertex}", s)
	// Numaflow's HTTP source answers GET /health with 200, behind the same
	// token as the data (its auth layer covers both routes).
	env.Mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) {
		if !s.authorized(w, r) {
			return
		}
		w.WriteHeader(http.StatusOK)
	})
	return s, nil
}

// reply is the JSON body of every answer.
type reply struct {
	// Message is Numaflow's HTTP source's word on a 200.
	Message string   `json:"message,omitempty"`
	ID      string   `json:"id,omitempty"`
	IDs     []string `json:"ids,omitempty"`
	Error   string   `json:"error,omitempty"`
}

func writeReply(w http.ResponseWriter, status int, r reply) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(r)
}

func fail(w http.ResponseWriter, status int, format string, args ...any) {
	writeReply(w, status, reply{Error: fmt.Sprintf(format, args...)})
}

// refuse answers without reading the body and closes the connection, so
// the server does not drain a body nobody wants (it would wait on a caller
// that never sends it).
func refuse(w http.ResponseWriter, status int, format string, args ...any) {
	w.Header().Set("Connection", "close")
	fail(w, status, format, args...)
}

// retryAfter is the Retry-After of a 429 or 503, in seconds.
const retryAfter = "1"

// authorized checks the bearer token, and answers 401 without it.
func (s *Source) authorized(w http.ResponseWriter, r *http.Request) bool {
	if s.auth != nil && subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), s.auth) != 1 {
		w.Header().Set("WWW-Authenticate", `Bearer realm="monovertex"`)
		refuse(w, http.StatusUnauthorized, "missing or wrong bearer token")
		return false
	}
	return true
}

// ServeHTTP takes one request and answers once its messages are final.
func (s *Source) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if v := r.PathValue("vertex"); v != "" && v != s.name {
		refuse(w, http.StatusNotFound, "no vertex %q here; post to / or /vertices/%s", v, s.name)
		return
	}
	// Before any body byte is read: an unauthenticated caller costs no
	// buffer at all.
	if !s.authorized(w, r) {
		return
	}
	if r.ContentLength > s.cfg.MaxBody {
		refuse(w, http.StatusRequestEntityTooLarge, "body of %d bytes is above MV_HTTP_MAX_BODY=%d", r.ContentLength, s.cfg.MaxBody)
		return
	}
	// The body's bytes count against the budget until the answer: the
	// message holds them while the engine works on it.
	lease := s.budget.Lease()
	defer lease.Release()
	body, pooled, status, err := s.readBody(w, r, lease)
	if err != nil {
		if status == http.StatusServiceUnavailable {
			w.Header().Set("Retry-After", retryAfter)
		}
		// The rest of the body is unread: never reuse the connection.
		refuse(w, status, "%v", err)
		return
	}
	msgs, err := s.messages(r, body)
	if err != nil {
		pooled.Release()
		status := http.StatusBadRequest
		if errors.Is(err, cewire.ErrTooManyEvents) {
			status = http.StatusRequestEntityTooLarge
			err = fmt.Errorf("batch is above MV_HTTP_BUFFER_SIZE=%d events; split it", s.cfg.BufferSize)
		}
		fail(w, status, "%v", err)
		return
	}
	giveBuffer(msgs, pooled)
	// The reply names the request's own IDs, taken before the engine
	// can rename the messages.
	ids := make([]string, len(msgs))
	for i, m := range msgs {
		ids[i] = m.ID
	}
	req, status, err := s.enqueue(msgs)
	if err != nil {
		pooled.Release() // not queued: nothing else holds it
		if status == http.StatusTooManyRequests {
			w.Header().Set("Retry-After", retryAfter)
		}
		fail(w, status, "%v", err)
		return
	}
	select {
	case <-req.done:
	case <-r.Context().Done():
		s.abandon(msgs)
		return
	}
	if req.failed {
		writeReply(w, http.StatusInternalServerError, reply{Error: req.reason + "; retry the request", ID: single(ids), IDs: many(ids)})
		return
	}
	if s.mapper != nil {
		s.answerResults(w, r, msgs, ids)
		return
	}
	writeReply(w, http.StatusOK, reply{Message: "Data received successfully", ID: single(ids), IDs: many(ids)})
}

func single(ids []string) string {
	if len(ids) == 1 {
		return ids[0]
	}
	return ""
}

func many(ids []string) []string {
	if len(ids) == 1 {
		return nil
	}
	if ids == nil {
		return []string{}
	}
	return ids
}

// Ready reports whether the source still takes requests.
func (s *Source) Ready(context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errors.New("http source closed")
	}
	return nil
}

// NumaflowOffset is the offset numaflow-core names a message's outputs
// from: the message's ID and "-<replica>" (source/http.rs), while its
// MessageID has the ID alone. The engine asks only under
// MV_MESSAGE_IDS=numaflow, before it names the message.
func (s *Source) NumaflowOffset(m *runner.Message) string { return m.ID + s.offsetSuffix }

// StopReading is called by the engine when it stops reading for good
// (shutdown, or a fatal error): requests not read yet are answered 500 at once, and so are new
// ones, so callers retry elsewhere instead of waiting out the drain; the
// requests already read finish normally.
func (s *Source) StopReading() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopping = true
	for _, e := range s.queue {
		s.finish(e, "the runner is shutting down")
	}
	clear(s.queue)
	s.queue = nil
}

var _ runner.ReadStopper = (*Source)(nil)

// Close stops taking requests and answers every request still waiting with
// 500, so its caller retries (against another replica, or after restart).
func (s *Source) Close(context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	n := len(s.inflight)
	for _, e := range s.inflight {
		s.finish(e, "the runner is shutting down")
	}
	clear(s.queue)
	s.queue = nil
	if n > 0 {
		s.log.Infow("http source closed; answered waiting requests with 500 so their callers retry", "messages", n)
	}
	if n, _ := s.lostLog.flush(); n > 0 {
		s.log.Warnw("http source: messages were written and acked, but their result (MV_HTTP_RESPONSE=result) reached no caller", "lost_since_last_line", n, "lost_total", s.nLost.Load())
	}
	return nil
}
