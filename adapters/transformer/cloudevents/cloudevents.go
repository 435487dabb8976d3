// Package cloudevents is a transformer that calls a CloudEvents function
// over HTTP (MV_TRANSFORMER=cloudevents), such as a Knative Service deployed
// with `kn service create`. Each message is posted as one event to
// MV_TRANSFORMER_URL with `Prefer: reply`; the answer decides the outputs:
//
//   - 200 (or another 2xx but 202) with a reply event: one output.
//   - a reply of content type application/cloudevents-batch+json: one output
//     per event in the batch (fan-out; an empty batch is a drop).
//   - 202, or any 2xx without a body or CloudEvents headers: no output (drop).
//   - 5xx, 404, 408, 409, 429, timeouts (MV_TRANSFORMER_TIMEOUT) and
//     connection errors: a failure the engine retries with the retry strategy.
//   - other 4xx and 3xx: a permanent failure; MV_ON_FAILURE decides at once.
//   - a 2xx whose body is not a valid CloudEvent: a permanent failure, since
//     the same input gets the same broken reply (the function has a bug).
//   - a reply longer than MV_TRANSFORMER_MAX_REPLY, or a batch of more than
//     MV_TRANSFORMER_MAX_REPLY_EVENTS events: a permanent failure. The body
//     is read no further than the limit (a Content-Length above it is not
//     read at all).
//
// Memory: every reply being read or decoded holds its bytes (the decoded
// events counted too) in one budget shared by all calls,
// MV_TRANSFORMER_REPLY_BUDGET; reading waits while the budget is spent, so
// concurrent large replies cannot add up past it. A reply of known length
// takes its share at once; a streamed one grows it as bytes arrive. A reply
// that holds part of the budget and cannot get more (at once when every
// other such reply waits too, else after cewire.HeldWait) fails as a
// retryable error and frees what it held.
//
// A message answered permanently is not posted again within
// cewire.PermanentRetryFloor (1s), whatever MV_RETRY_INTERVAL says: with
// MV_ON_FAILURE=retry it is retried at most once a second, and with
// fallback or drop it is posted once.
//
// A call that fails to connect, or whose TLS handshake meets a server that
// answers plain HTTP or a certificate the runner does not trust, fails its
// message as runner.Unavailable: the engine retries it without spending its
// retry steps, so a function that is down or misconfigured does not push
// everything to MV_ON_FAILURE. The log says once what the peer answered,
// and /readyz answers 503 until a call gets an HTTP answer again.
package cloudevents

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"go.uber.org/zap"

	"github.com/monovertex/monovertex/adapters/internal/cewire"
	"github.com/monovertex/monovertex/runner"
)

// Config holds the transformer's settings.
type Config struct {
	URL           string        `envconfig:"MV_TRANSFORMER_URL" desc:"URL of the CloudEvents function to call (required)"`
	Mode          string        `envconfig:"MV_TRANSFORMER_MODE" default:"binary" desc:"CloudEvents content mode of requests: binary or structured"`
	Concurrency   int           `envconfig:"MV_TRANSFORMER_CONCURRENCY" default:"64" desc:"calls to the function in flight at once, over kept-alive connections"`
	Timeout       time.Duration `envconfig:"MV_TRANSFORMER_TIMEOUT" default:"30s" desc:"longest wait for one call, reply included; a timeout is retried"`
	RetryAfterMax time.Duration `envconfig:"MV_TRANSFORMER_RETRY_AFTER_MAX" default:"60s" desc:"longest wait a 429 or 503 answer's Retry-After may impose before the retry (Knative's delivery.retryAfterMax); 0 ignores Retry-After"`
	H2C           bool          `envconfig:"MV_TRANSFORMER_H2C" default:"false" desc:"use HTTP/2 without TLS (h2c, prior knowledge) to an http:// URL"`
	MaxReply      int64         `envconfig:"MV_TRANSFORMER_MAX_REPLY" default:"67108864" desc:"largest reply body in bytes (at most 1 GiB); a larger reply is read no further and is a permanent failure"`
	ReplyBudget   int64         `envconfig:"MV_TRANSFORMER_REPLY_BUDGET" default:"268435456" desc:"bytes that replies being read and decoded may hold at once, shared by all calls (each decoded event counts 1 KiB more); reading waits while it is spent. At least 2 x MV_TRANSFORMER_MAX_REPLY + MV_TRANSFORMER_MAX_REPLY_EVENTS KiB + 1, at most 64 GiB"`
	MaxEvents     int           `envconfig:"MV_TRANSFORMER_MAX_REPLY_EVENTS" default:"10000" desc:"most events one reply may fan out to (at most 1000000); a larger batch is a permanent failure"`
	cewire.Config
	// Connection takes the client's dial outcomes (set from runner.Env,
	// not from the environment).
	Connection runner.Connection `ignored:"true"`
}

// Defaults of the settings that a zero value leaves unset, and the bounds
// that keep one setting from asking for more memory than a pod has.
const (
	DefaultReplyBudget = 256 << 20
	DefaultMaxEvents   = 10000
	maxMaxReply        = 1 << 30
	maxReplyBudget     = 64 << 30
	maxMaxEvents       = 1000000
)

// withDefaults fills the settings a Config built in code may leave zero.
func (c Config) withDefaults() Config {
	if c.ReplyBudget == 0 {
		c.ReplyBudget = max(DefaultReplyBudget, c.minBudget())
	}
	if c.MaxEvents == 0 {
		c.MaxEvents = DefaultMaxEvents
	}
	return c
}

// minBudget is the budget one reply within the limits needs alone: the
// body while it is joined (twice its size) and its decoded events.
func (c *Config) minBudget() int64 {
	events := c.MaxEvents
	if events == 0 {
		events = DefaultMaxEvents
	}
	return 2*c.MaxReply + int64(events)*cewire.EventOverhead + 1
}

// Validate checks the values that parse but cannot be used.
func (c *Config) Validate(role runner.Role) error {
	if c.URL == "" {
		slot := "MV_TRANSFORMER"
		if role == runner.RoleUDF {
			slot = "MV_UDF"
		}
		return &runner.ConfigError{Var: "MV_TRANSFORMER_URL", Value: "", Reason: "required with " + slot + "=cloudevents: the URL of the CloudEvents function, e.g. http://my-fn.default.svc.cluster.local"}
	}
	if c.RetryAfterMax < 0 {
		return &runner.ConfigError{Var: "MV_TRANSFORMER_RETRY_AFTER_MAX", Value: c.RetryAfterMax.String(), Reason: "must be 0 (ignore Retry-After) or a positive duration such as 60s"}
	}
	if u, err := url.Parse(c.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return &runner.ConfigError{Var: "MV_TRANSFORMER_URL", Value: c.URL, Reason: "must be an absolute http:// or https:// URL"}
	}
	if _, err := cewire.ParseMode(c.Mode); err != nil {
		return &runner.ConfigError{Var: "MV_TRANSFORMER_MODE", Value: c.Mode, Reason: "must be binary or structured"}
	}
	if c.Concurrency <= 0 {
		return &runner.ConfigError{Var: "MV_TRANSFORMER_CONCURRENCY", Value: strconv.Itoa(c.Concurrency), Reason: "must be a positive whole number"}
	}
	if c.Timeout < 0 {
		return &runner.ConfigError{Var: "MV_TRANSFORMER_TIMEOUT", Value: c.Timeout.String(), Reason: "must be a positive duration such as 30s, or 0 for none"}
	}
	if c.MaxReply <= 0 || c.MaxReply > maxMaxReply {
		return &runner.ConfigError{Var: "MV_TRANSFORMER_MAX_REPLY", Value: strconv.FormatInt(c.MaxReply, 10), Reason: fmt.Sprintf("must be a positive number of bytes, at most %d (1 GiB)", maxMaxReply)}
	}
	if c.MaxEvents < 0 || c.MaxEvents > maxMaxEvents {
		return &runner.ConfigError{Var: "MV_TRANSFORMER_MAX_REPLY_EVENTS", Value: strconv.Itoa(c.MaxEvents), Reason: fmt.Sprintf("must be a positive whole number, at most %d", maxMaxEvents)}
	}
	if c.ReplyBudget != 0 {
		if minimum := c.minBudget(); c.ReplyBudget < minimum || c.ReplyBudget > maxReplyBudget {
			return &runner.ConfigError{Var: "MV_TRANSFORMER_REPLY_BUDGET", Value: strconv.FormatInt(c.ReplyBudget, 10), Reason: fmt.Sprintf("must be from %d (2 x MV_TRANSFORMER_MAX_REPLY + MV_TRANSFORMER_MAX_REPLY_EVENTS KiB + 1, so one reply fits alone) to %d (64 GiB) bytes", minimum, int64(maxReplyBudget))}
		}
	}
	return c.Config.Validate()
}

func init() {
	runner.RegisterTransformer("cloudevents", func(_ context.Context, env runner.Env, cfg *Config) (runner.Transformer, error) {
		cfg.Connection = env.Connection
		return New(*cfg, env.Name, env.Logger)
	})
}

// Transformer calls a CloudEvents function for each message.
type Transformer struct {
	client    *cewire.Client
	mapper    *cewire.Mapper
	budget    *cewire.Budget
	maxEvents int
	log       *zap.SugaredLogger
	// calls bounds the calls in flight across concurrent Transform calls.
	calls *cewire.Calls
}

var (
	_ runner.Transformer = (*Transformer)(nil)
	_ runner.Readier     = (*Transformer)(nil)
)

// New builds a transformer; name is MV_NAME (for the default event source).
func New(cfg Config, name string, log *zap.SugaredLogger) (*Transformer, error) {
	if err := cfg.Validate(runner.RoleTransformer); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	if log == nil {
		log = zap.NewNop().Sugar()
	}
	mapper, err := cewire.New(cfg.Config, name, log)
	if err != nil {
		return nil, err
	}
	trust, err := cewire.LoadTrust(cfg.CACerts)
	if err != nil {
		return nil, &runner.ConfigError{Var: "K_CA_CERTS", Value: "", Reason: err.Error()}
	}
	mode, _ := cewire.ParseMode(cfg.Mode)
	budget := cewire.NewBudget(cfg.ReplyBudget)
	return &Transformer{
		client: cewire.NewClient(cewire.ClientOptions{
			URL: cfg.URL, Mode: mode, Timeout: cfg.Timeout, Concurrency: cfg.Concurrency,
			H2C: cfg.H2C, MaxReply: cfg.MaxReply, Budget: budget,
			RetryAfterMax: cfg.RetryAfterMax, Trust: trust,
			Header: http.Header{"Prefer": {"reply"}}, Connection: cfg.Connection,
			Variable: "MV_TRANSFORMER_URL", Log: log,
		}),
		mapper:    mapper,
		budget:    budget,
		maxEvents: cfg.MaxEvents,
		log:       log,
		calls:     cewire.NewCalls(cfg.Concurrency),
	}, nil
}

// Transform posts every message to the function, MV_TRANSFORMER_CONCURRENCY
// at a time, and returns one result per message in input order.
func (t *Transformer) Transform(ctx context.Context, msgs []*runner.Message) ([]runner.TransformResult, error) {
	results := make([]runner.TransformResult, len(msgs))
	started, err := t.calls.Run(ctx, msgs, func(i int) error {
		results[i] = t.call(ctx, msgs[i])
		return results[i].Err
	})
	if err != nil {
		return nil, fmt.Errorf("cloudevents transformer: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("cloudevents transformer: %d of %d calls cut short: %w", len(msgs)-started, len(msgs), err)
	}
	return results, nil
}

// call transforms one message; the error is the transport error, if any.
func (t *Transformer) call(ctx context.Context, m *runner.Message) runner.TransformResult {
	ev, err := t.mapper.ToEvent(m)
	if err != nil {
		return runner.TransformResult{Err: runner.Permanent(fmt.Errorf("cloudevents transformer: message %q: %w", m.ID, err))}
	}
	resp, err := t.client.Post(ctx, &ev, true)
	if err != nil {
		return runner.TransformResult{Err: fmt.Errorf("cloudevents transformer: message %q: %w", m.ID, cewire.PostError(err))}
	}
	defer resp.Lease.Release()
	res := t.result(ctx, m, resp)
	if resp.Buf != nil {
		// A binary reply's data is its body: the outputs holding it give
		// the buffer back after the input's ack; if none does, now.
		held := false
		for _, o := range res.Outputs {
			held = held || resp.Buf.Backs(o.Value)
		}
		if held {
			res.Hold(resp.Buf.Release)
		} else {
			resp.Buf.Release()
		}
	}
	return res
}

// result turns the function's answer into the message's outputs.
func (t *Transformer) result(ctx context.Context, m *runner.Message, resp *cewire.Response) runner.TransformResult {
	switch {
	case resp.Status == http.StatusAccepted:
		// Knative: a 202 is never a reply, whatever its body.
		return runner.TransformResult{}
	case resp.Status >= 200 && resp.Status < 300:
	default:
		return runner.TransformResult{Err: fmt.Errorf("cloudevents transformer: message %q: %w", m.ID, t.client.CheckStatus(resp))}
	}
	if !cewire.IsCloudEvent(resp.Header) && len(resp.Body) == 0 {
		return runner.TransformResult{}
	}
	outs, err := cewire.ReadMessagesLimited(ctx, resp.Header, resp.Body, t.maxEvents, resp.Lease)
	switch {
	case err == nil:
	case errors.Is(err, cewire.ErrBudgetBusy) || ctx.Err() != nil:
		return runner.TransformResult{Err: fmt.Errorf("cloudevents transformer: message %q: decoding the reply: %w", m.ID, err)}
	case errors.Is(err, cewire.ErrTooManyEvents):
		return runner.TransformResult{Err: runner.Permanent(fmt.Errorf("cloudevents transformer: message %q: function at %s answered a batch that fans out too far: %w (MV_TRANSFORMER_MAX_REPLY_EVENTS)", m.ID, t.client.URL(), err))}
	case errors.Is(err, cewire.ErrBudgetExceeded):
		return runner.TransformResult{Err: runner.Permanent(fmt.Errorf("cloudevents transformer: message %q: decoding the reply: %w (MV_TRANSFORMER_REPLY_BUDGET)", m.ID, err))}
	default:
		return runner.TransformResult{Err: runner.Permanent(fmt.Errorf("cloudevents transformer: message %q: function at %s answered %d with a body that is not a valid CloudEvent reply: %w", m.ID, t.client.URL(), resp.Status, err))}
	}
	return runner.TransformResult{Outputs: outs}
}

// Ready is an error while the function cannot be reached (see
// cewire.Client.Ready), so /readyz tells what holds the messages.
func (t *Transformer) Ready(ctx context.Context) error { return t.client.Ready(ctx) }

// Close drops the kept-alive connections.
func (t *Transformer) Close(context.Context) error {
	t.calls.Stop()
	t.client.CloseIdle()
	return nil
}
