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
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/monovertex/monovertex/adapters/internal/cewire"
	"github.com/monovertex/monovertex/internal/payloadpool"
	"github.com/monovertex/monovertex/runner"
)

// Header names of Numaflow's HTTP source.
const (
	HeaderID        = "X-Numaflow-Id"
	HeaderEventTime = "X-Numaflow-Event-Time"
	HeaderKeys      = "X-Numaflow-Keys"
)

// Config holds the HTTP source's settings.
type Config struct {
	AuthToken   string        `envconfig:"MV_HTTP_AUTH_TOKEN" desc:"when set, requests must carry Authorization: Bearer <token> (else 401); white space around it is trimmed, as Numaflow trims a Secret's value"`
	MaxBody     int64         `envconfig:"MV_HTTP_MAX_BODY" default:"67108864" desc:"largest request body in bytes, at most 1 GiB (else 413)"`
	MaxInflight int64         `envconfig:"MV_HTTP_MAX_INFLIGHT_BYTES" default:"268435456" desc:"request body bytes held at once across all connections, from the first byte until the answer; beyond it requests get 503 with Retry-After"`
	BufferSize  int           `envconfig:"MV_HTTP_BUFFER_SIZE" default:"1000" desc:"messages accepted but not yet read by the runner; beyond it requests get 429"`
	CloudEvents bool          `envconfig:"MV_HTTP_CLOUDEVENTS" default:"true" desc:"decode a request that is a CloudEvent (Ce-Specversion, or a cloudevents content type) into its events; false takes every body as it is, as Numaflow's HTTP source does"`
	BodyTimeout time.Duration `envconfig:"MV_HTTP_BODY_TIMEOUT" default:"60s" desc:"longest time to receive a request body; a stalled client gets 408 and is disconnected"`
	MaxHeader   int           `envconfig:"MV_HTTP_MAX_HEADER_BYTES" default:"1048576" desc:"largest request head (request line and headers) in bytes, 4 KiB to 16 MiB (else 431); the heads being received share a budget of 16 times this (at least 16 MiB), and when it is spent the largest unfinished one gets 431"`
	MaxConns    int           `envconfig:"MV_HTTP_MAX_CONNECTIONS" default:"1024" desc:"open connections on $PORT, 1 to 1048576; one more is answered 503 with Retry-After and closed"`
	Response    string        `envconfig:"MV_HTTP_RESPONSE" default:"ack" desc:"what a request is answered with once its messages are final: ack (200 and the IDs) or result (the messages as the sink wrote them, after the transformer and map UDF: one as a binary CloudEvent, several as a CloudEvents batch, none as 204)"`
	// Config is the source and type of result events whose message
	// carries none (MV_HTTP_RESPONSE=result).
	cewire.Config
}

// The values of MV_HTTP_RESPONSE.
const (
	ResponseAck    = "ack"
	ResponseResult = "result"
)

// Bounds of the size settings: above them a single request, or the bodies
// held together, could take more memory than a runner's container has.
const (
	// MaxBodyLimit is the largest allowed MV_HTTP_MAX_BODY (1 GiB).
	MaxBodyLimit = 1 << 30
	// MaxInflightLimit is the largest allowed MV_HTTP_MAX_INFLIGHT_BYTES (64 GiB).
	MaxInflightLimit = 64 << 30
	// MinHeaderLimit and MaxHeaderLimit bound MV_HTTP_MAX_HEADER_BYTES.
	MinHeaderLimit, MaxHeaderLimit = 4 << 10, 16 << 20
	// MaxConnsLimit is the largest allowed MV_HTTP_MAX_CONNECTIONS.
	MaxConnsLimit = 1 << 20
)

// Validate checks the values that parse but cannot be used.
func (c *Config) Validate(runner.Role) error {
	switch {
	case c.MaxBody <= 0 || c.MaxBody > MaxBodyLimit:
		return &runner.ConfigError{Var: "MV_HTTP_MAX_BODY", Value: strconv.FormatInt(c.MaxBody, 10), Reason: fmt.Sprintf("must be a positive number of bytes up to %d (1 GiB)", MaxBodyLimit)}
	case c.MaxInflight <= 0 || c.MaxInflight > MaxInflightLimit:
		return &runner.ConfigError{Var: "MV_HTTP_MAX_INFLIGHT_BYTES", Value: strconv.FormatInt(c.MaxInflight, 10), Reason: fmt.Sprintf("must be a positive number of bytes up to %d (64 GiB)", int64(MaxInflightLimit))}
	case c.MaxInflight < c.MaxBody:
		return &runner.ConfigError{Var: "MV_HTTP_MAX_INFLIGHT_BYTES", Value: strconv.FormatInt(c.MaxInflight, 10),
			Reason: fmt.Sprintf("must be at least MV_HTTP_MAX_BODY=%d, or the largest body allowed could never be taken", c.MaxBody)}
	case c.BufferSize <= 0:
		return &runner.ConfigError{Var: "MV_HTTP_BUFFER_SIZE", Value: strconv.Itoa(c.BufferSize), Reason: "must be a positive whole number"}
	case c.MaxHeader < MinHeaderLimit || c.MaxHeader > MaxHeaderLimit:
		return &runner.ConfigError{Var: "MV_HTTP_MAX_HEADER_BYTES", Value: strconv.Itoa(c.MaxHeader), Reason: fmt.Sprintf("must be a number of bytes from %d (4 KiB) to %d (16 MiB)", MinHeaderLimit, MaxHeaderLimit)}
	case c.MaxConns <= 0 || c.MaxConns > MaxConnsLimit:
		return &runner.ConfigError{Var: "MV_HTTP_MAX_CONNECTIONS", Value: strconv.Itoa(c.MaxConns), Reason: fmt.Sprintf("must be a whole number from 1 to %d", MaxConnsLimit)}
	case c.Response != "" && c.Response != ResponseAck && c.Response != ResponseResult:
		return &runner.ConfigError{Var: "MV_HTTP_RESPONSE", Value: c.Response, Reason: "must be ack or result"}
	case c.BodyTimeout <= 0:
		return &runner.ConfigError{Var: "MV_HTTP_BODY_TIMEOUT", Value: c.BodyTimeout.String(), Reason: "must be a positive duration such as 60s"}
	case c.AuthToken != "" && strings.TrimSpace(c.AuthToken) == "":
		return &runner.ConfigError{Var: "MV_HTTP_AUTH_TOKEN", Value: "(hidden)", Reason: "is only white space"}
	case !validToken(strings.TrimSpace(c.AuthToken)):
		// Never echo the token itself.
		return &runner.ConfigError{Var: "MV_HTTP_AUTH_TOKEN", Value: "(hidden)", Reason: "must be printable UTF-8 text without spaces, line breaks or other control characters"}
	}
	return c.Config.Validate()
}

// validToken reports whether a token can travel in an Authorization header
// and be typed back by a caller: no white space, no control bytes.
func validToken(token string) bool {
	if !utf8.ValidString(token) {
		return false
	}
	return strings.IndexFunc(token, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) < 0
}

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
	// id is the message's ID as the request gave it. Once read, msg.ID is
	// the engine's (under MV_MESSAGE_IDS=numaflow it renames every message
	// after Read), so the source keys its bookkeeping and its reply on this.
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
	// message's offset for Numaflow's IDs is its ID and this.
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
	_ runner.Source        = (*Source)(nil)
	_ runner.Nacker        = (*Source)(nil)
	_ runner.PendingReader = (*Source)(nil)
	_ runner.Readier       = (*Source)(nil)
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

// Body buffer sizes: what a buffer starts at before any byte arrived, with
// and without a Content-Length. Past them it doubles as it fills.
const (
	presizeLimit = 64 << 10
	firstChunk   = 4 << 10
)

// admissionWait is the longest a request waits for its first share of the
// in-flight budget before it is answered 503.
const admissionWait = time.Second

// giveBuffer hands the pooled body buffer to the message whose value it
// holds, for the engine to release after the ack, or releases it at once
// when no message holds it (events decoded from it, not aliasing it).
// Messages never share it: a batch whose values alias the body is left
// to the garbage collector.
func giveBuffer(msgs []*runner.Message, pooled *payloadpool.Buffer) {
	if pooled == nil {
		return
	}
	var holder *runner.Message
	for _, m := range msgs {
		if pooled.Backs(m.Value) {
			if holder != nil {
				return
			}
			holder = m
		}
	}
	if holder == nil {
		pooled.Release()
		return
	}
	holder.Release = pooled.Release
}

// readBody reads the whole body within MV_HTTP_BODY_TIMEOUT and
// MV_HTTP_MAX_BODY, charging its buffer to lease before each growth, and
// returns the status to answer if it cannot. A body with a length past
// the first buffer is read into a pooled buffer, returned with it.
func (s *Source) readBody(w http.ResponseWriter, r *http.Request, lease *cewire.Lease) ([]byte, *payloadpool.Buffer, int, error) {
	rc := http.NewResponseController(w)
	// The server has no read timeout (it would also cut the wait for the
	// ack), so bound the body here; then lift the bound so the server keeps
	// watching for the caller hanging up while the message is processed.
	// After a failed read the bound stays: the server then gives up on the
	// rest of the body at once and closes the connection.
	_ = rc.SetReadDeadline(time.Now().Add(s.cfg.BodyTimeout))
	body := http.MaxBytesReader(w, r.Body, s.cfg.MaxBody)
	// most is the largest the buffer may need to be: the promised length
	// (already checked against the limit) or the limit.
	most, size := s.cfg.MaxBody, int64(firstChunk)
	if n := r.ContentLength; n >= 0 {
		most, size = n, min(n, presizeLimit)
	}
	size = min(size, most)
	admit, cancel := context.WithTimeout(r.Context(), s.admissionWait)
	err := lease.Grow(admit, size)
	cancel()
	if err != nil {
		return nil, nil, budgetStatus(err), s.budgetError(err)
	}
	buf := make([]byte, 0, size)
	var pooled *payloadpool.Buffer
	fail := func(status int, err error) ([]byte, *payloadpool.Buffer, int, error) {
		pooled.Release()
		return nil, nil, status, err
	}
	for {
		if len(buf) == cap(buf) {
			// Doubling, with or without a declared length: the budget
			// follows the bytes that arrived (at most twice them), so a
			// caller that declares 64 MiB and sends 64 KiB holds 128 KiB,
			// not 64 MiB, and four such callers cannot spend the budget
			// of everyone else. The last step is the declared length.
			next := min(2*int64(cap(buf)), most)
			if next <= int64(cap(buf)) {
				// Full at the most the body may hold: only its end may
				// follow. More than that is MaxBytesReader's error.
				var probe [1]byte
				n, err := body.Read(probe[:])
				switch {
				case err == io.EOF && n == 0:
					_ = rc.SetReadDeadline(time.Time{})
					return buf, pooled, 0, nil
				case err == nil && n == 0:
					continue
				case err == nil || err == io.EOF:
					err = &http.MaxBytesError{Limit: s.cfg.MaxBody}
				}
				return fail(s.readError(err))
			}
			if err := lease.Grow(r.Context(), next-int64(cap(buf))); err != nil {
				return fail(budgetStatus(err), s.budgetError(err))
			}
			var grown []byte
			if r.ContentLength >= 0 {
				// Pooled at every step, the step before given back at
				// once: the last one holds the value, which the engine
				// gives back once the message is acked. Not cleared:
				// every byte is read into it before it is used.
				nb := payloadpool.Get(int(next))
				grown = nb.B[:len(buf):len(nb.B)]
				copy(grown, buf)
				pooled.Release()
				pooled = nb
			} else {
				grown = make([]byte, len(buf), next)
				copy(grown, buf)
			}
			buf = grown
		}
		n, err := body.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			_ = rc.SetReadDeadline(time.Time{})
			return buf, pooled, 0, nil
		}
		if err != nil {
			return fail(s.readError(err))
		}
	}
}

// readError is the answer to a body that could not be read.
func (s *Source) readError(err error) (int, error) {
	var tooLarge *http.MaxBytesError
	var ne net.Error
	switch {
	case errors.As(err, &tooLarge):
		return http.StatusRequestEntityTooLarge, fmt.Errorf("body is above MV_HTTP_MAX_BODY=%d bytes", s.cfg.MaxBody)
	case errors.Is(err, os.ErrDeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()):
		return http.StatusRequestTimeout, fmt.Errorf("body did not arrive within MV_HTTP_BODY_TIMEOUT=%s", s.cfg.BodyTimeout)
	}
	return http.StatusBadRequest, fmt.Errorf("read body: %v", err)
}

// budgetStatus is the answer to a body that found the in-flight budget
// spent: 413 if it could never fit (Validate rules that out), else 503.
func budgetStatus(err error) int {
	if errors.Is(err, cewire.ErrBudgetExceeded) {
		return http.StatusRequestEntityTooLarge
	}
	return http.StatusServiceUnavailable
}

func (s *Source) budgetError(err error) error {
	if errors.Is(err, cewire.ErrBudgetExceeded) {
		return fmt.Errorf("body is above MV_HTTP_MAX_INFLIGHT_BYTES=%d", s.cfg.MaxInflight)
	}
	return fmt.Errorf("MV_HTTP_MAX_INFLIGHT_BYTES=%d of request bodies are held by other requests; retry later", s.cfg.MaxInflight)
}

// dropped are request headers never copied onto a message: credentials and
// what belongs to the connection, not to the message.
var dropped = map[string]bool{
	"Authorization": true, "Proxy-Authorization": true, "Cookie": true,
	"Connection": true, "Keep-Alive": true, "Te": true, "Trailer": true,
	"Transfer-Encoding": true, "Upgrade": true, "Content-Length": true, "Expect": true,
	HeaderEventTime: true,
}

// messages turns a request into messages: its CloudEvents, or its body.
func (s *Source) messages(r *http.Request, body []byte) ([]*runner.Message, error) {
	now := time.Now()
	if s.cfg.CloudEvents && cewire.IsCloudEvent(r.Header) {
		// BufferSize bounds the batch before the events past it are
		// decoded: more could never be queued anyway.
		msgs, err := cewire.ReadMessagesLimited(r.Context(), r.Header, body, s.cfg.BufferSize, nil)
		if err != nil {
			return nil, err
		}
		seen := make(map[string]bool, len(msgs))
		for _, m := range msgs {
			if !cewire.ValidID(m.ID) {
				// Refused here, where the caller can fix it, rather than
				// by a CloudEvents sink later as a permanent failure.
				return nil, fmt.Errorf("event id %q must be printable UTF-8 text", m.ID)
			}
			if strings.TrimSpace(m.ID) != m.ID {
				// " sp" and "sp" are one id to a sink that trims.
				return nil, fmt.Errorf("event id %q must not start or end with white space", m.ID)
			}
			if seen[m.ID] {
				return nil, fmt.Errorf("the batch has two events with id %q", m.ID)
			}
			seen[m.ID] = true
			if m.EventTime.IsZero() {
				m.EventTime = now
			}
			requestTrace(m, r.Header)
		}
		return msgs, nil
	}
	if h := binaryAttribute(r.Header); h != "" && s.cfg.CloudEvents {
		return nil, fmt.Errorf("the request has a %s header but no Ce-Specversion: send Ce-Specversion: 1.0 with a binary CloudEvent", h)
	}
	m := &runner.Message{Value: body, EventTime: now, Headers: map[string]string{}}
	m.ID = strings.TrimSpace(r.Header.Get(HeaderID))
	if m.ID == "" {
		// numaflow-http's Uuid::now_v7(): time-ordered, so IDs sort by
		// arrival, lower-case hyphenated as the uuid crate prints it.
		m.ID = uuid.Must(uuid.NewV7()).String()
	} else if !cewire.ValidID(m.ID) {
		return nil, fmt.Errorf("%s must be printable UTF-8 text", HeaderID)
	}
	if v := r.Header.Get(HeaderEventTime); v != "" {
		ms, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%s must be milliseconds since the epoch, got %q", HeaderEventTime, v)
		}
		m.EventTime = time.UnixMilli(ms)
	}
	if v, ok := r.Header[HeaderKeys]; ok && len(v) > 0 {
		// Trimmed, empty ones left out, as Numaflow parses them.
		for _, k := range strings.Split(v[0], ",") {
			if k = strings.TrimSpace(k); k != "" {
				m.Keys = append(m.Keys, k)
			}
		}
	}
	for name, values := range r.Header {
		if dropped[name] || len(values) == 0 {
			continue
		}
		m.Headers[strings.ToLower(name)] = values[0]
	}
	// Numaflow puts the ID, given or made, in this header, spelt so,
	// beside the request's own headers (lower case).
	m.Headers[HeaderID] = m.ID
	return []*runner.Message{m}, nil
}

// requestTrace gives an event without a distributed-tracing extension the
// request's W3C traceparent and tracestate headers: the event's own
// extension says where the event came from and wins, the headers say which
// call delivered it. (A plain body keeps all its headers, these among them.)
func requestTrace(m *runner.Message, h http.Header) {
	if _, ok := m.Headers[runner.TraceParentHeader]; ok {
		return
	}
	tp := h.Get("Traceparent")
	if tp == "" {
		return
	}
	m.Headers[runner.TraceParentHeader] = tp
	if ts := h.Get("Tracestate"); ts != "" {
		m.Headers[runner.TraceStateHeader] = ts
	}
}

// binaryAttribute names a required CloudEvents attribute header of the
// request, or is empty when it has none. Such a request without
// Ce-Specversion is a broken binary event, not a plain body.
func binaryAttribute(h http.Header) string {
	for _, name := range []string{"Ce-Id", "Ce-Source", "Ce-Type"} {
		if _, ok := h[name]; ok {
			return name
		}
	}
	return ""
}

// enqueue registers the messages of one request, all or none.
func (s *Source) enqueue(msgs []*runner.Message) (*request, int, error) {
	req := &request{done: make(chan struct{}), remaining: len(msgs)}
	if len(msgs) == 0 {
		close(req.done)
		return req, 0, nil
	}
	if len(msgs) > s.cfg.BufferSize {
		return nil, http.StatusRequestEntityTooLarge, fmt.Errorf("batch of %d events is above MV_HTTP_BUFFER_SIZE=%d; split it", len(msgs), s.cfg.BufferSize)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.stopping {
		return nil, http.StatusInternalServerError, errors.New("the runner is shutting down; retry the request")
	}
	for _, m := range msgs {
		if _, dup := s.inflight[m.ID]; dup {
			return nil, http.StatusConflict, fmt.Errorf("a message with id %q is already in flight", m.ID)
		}
	}
	if len(s.queue)+len(msgs) > s.cfg.BufferSize {
		return nil, http.StatusTooManyRequests, fmt.Errorf("%d messages are waiting (MV_HTTP_BUFFER_SIZE=%d); retry later", len(s.queue), s.cfg.BufferSize)
	}
	for _, m := range msgs {
		e := &entry{msg: m, id: m.ID, req: req}
		m.Offset = e
		if s.offsetSuffix != "" {
			runner.SetNumaflowOffset(m, m.ID+s.offsetSuffix)
		}
		s.inflight[e.id] = e
		s.queue = append(s.queue, e)
	}
	select {
	case s.wake <- struct{}{}:
	default:
	}
	return req, 0, nil
}

// abandon takes back the messages of a request whose caller hung up, as far
// as they were not read yet; read ones finish normally.
func (s *Source) abandon(msgs []*runner.Message) {
	s.mu.Lock()
	defer s.mu.Unlock()
	gone := map[*entry]bool{}
	for _, m := range msgs {
		e := m.Offset.(*entry)
		switch e.state {
		case queued:
			e.state = finished
			gone[e] = true
			if s.inflight[e.id] == e {
				delete(s.inflight, e.id)
			}
		case read:
			// It finishes without its caller: a result is then lost.
			e.req.gone = true
		}
	}
	if len(msgs) == 0 {
		return
	}
	if req := msgs[0].Offset.(*entry).req; req.remaining == 0 && !req.failed && s.mapper != nil && !req.gone {
		// Finished as the caller left: the answer was ready, no one took it.
		req.gone = true
		s.resultLost(msgs[0].Offset.(*entry).id, "the caller hung up as its result was ready")
	}
	if len(gone) == 0 {
		return
	}
	kept := s.queue[:0]
	for _, e := range s.queue {
		if !gone[e] {
			kept = append(kept, e)
		}
	}
	clear(s.queue[len(kept):])
	s.queue = kept
}

// Read hands queued messages to the engine: it returns as soon as any are
// waiting (up to max), or after timeout with none. Latency matters more here
// than full batches: a caller is waiting for each message.
func (s *Source) Read(ctx context.Context, max int, timeout time.Duration) ([]*runner.Message, error) {
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		s.mu.Lock()
		if n := min(max, len(s.queue)); n > 0 {
			out := make([]*runner.Message, n)
			for i, e := range s.queue[:n] {
				e.state = read
				out[i] = e.msg
			}
			clear(s.queue[:n])
			s.queue = s.queue[n:]
			if len(s.queue) > 0 {
				select {
				case s.wake <- struct{}{}:
				default:
				}
			}
			s.mu.Unlock()
			return out, nil
		}
		closed := s.closed
		s.mu.Unlock()
		if closed {
			return nil, nil
		}
		select {
		case <-s.wake:
		case <-timer.C:
			return nil, nil
		case <-ctx.Done():
			return nil, nil
		}
	}
}

// Ack answers the requests whose messages are now all final.
func (s *Source) Ack(_ context.Context, msgs []*runner.Message) error {
	return s.settle(msgs, "")
}

// Nack fails the requests of these messages: their callers get 500 and
// retry when they choose, so a delay has nothing to act on.
func (s *Source) Nack(_ context.Context, msgs []*runner.Message, _ runner.Nack) error {
	return s.settle(msgs, "the message could not be delivered")
}

func (s *Source) settle(msgs []*runner.Message, failure string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var foreign int
	for _, m := range msgs {
		e, ok := m.Offset.(*entry)
		if !ok {
			foreign++
			continue
		}
		s.finish(e, failure)
	}
	if foreign > 0 {
		return fmt.Errorf("http source: %d messages to settle were not read from it", foreign)
	}
	return nil
}

// finish makes one entry final; failure is empty for success. s.mu is held.
func (s *Source) finish(e *entry, failure string) {
	if e.state == finished {
		return
	}
	e.state = finished
	if s.inflight[e.id] == e {
		delete(s.inflight, e.id)
	}
	if failure != "" && !e.req.failed {
		e.req.failed = true
		e.req.reason = failure
	}
	e.req.remaining--
	if e.req.remaining == 0 {
		close(e.req.done)
		if e.req.gone && !e.req.failed && s.mapper != nil {
			s.resultLost(e.id, "the caller hung up before its messages were written")
		}
	}
}

// Pending is the number of messages waiting to be read.
func (s *Source) Pending(context.Context) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return int64(len(s.queue)), nil
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
