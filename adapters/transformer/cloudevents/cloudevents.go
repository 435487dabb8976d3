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
//
// When every call of a batch fails to connect, Transform fails as a whole
// ("function unreachable"): the engine waits and retries the batch without
// spending the messages' retry steps, so a function that is down does not
// push everything to MV_ON_FAILURE.
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

	"github.com/monovertex/monovertex/adapters/internal/cemap"
	"github.com/monovertex/monovertex/runner"
)

// Config holds the transformer's settings.
type Config struct {
	URL         string        `envconfig:"MV_TRANSFORMER_URL" desc:"URL of the CloudEvents function to call (required)"`
	Mode        string        `envconfig:"MV_TRANSFORMER_MODE" default:"binary" desc:"CloudEvents content mode of requests: binary or structured"`
	Concurrency int           `envconfig:"MV_TRANSFORMER_CONCURRENCY" default:"64" desc:"calls to the function in flight at once, over kept-alive connections"`
	Timeout     time.Duration `envconfig:"MV_TRANSFORMER_TIMEOUT" default:"30s" desc:"longest wait for one call, reply included; a timeout is retried"`
	H2C         bool          `envconfig:"MV_TRANSFORMER_H2C" default:"false" desc:"use HTTP/2 without TLS (h2c, prior knowledge) to an http:// URL"`
	MaxReply    int64         `envconfig:"MV_TRANSFORMER_MAX_REPLY" default:"67108864" desc:"largest reply body in bytes; a larger reply is a permanent failure"`
	cemap.Config
}

// Validate checks the values that parse but cannot be used.
func (c *Config) Validate(runner.Role) error {
	if c.URL == "" {
		return &runner.ConfigError{Var: "MV_TRANSFORMER_URL", Value: "", Reason: "required with MV_TRANSFORMER=cloudevents: the URL of the CloudEvents function, e.g. http://my-fn.default.svc.cluster.local"}
	}
	if u, err := url.Parse(c.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return &runner.ConfigError{Var: "MV_TRANSFORMER_URL", Value: c.URL, Reason: "must be an absolute http:// or https:// URL"}
	}
	if _, err := cemap.ParseMode(c.Mode); err != nil {
		return &runner.ConfigError{Var: "MV_TRANSFORMER_MODE", Value: c.Mode, Reason: "must be binary or structured"}
	}
	if c.Concurrency <= 0 {
		return &runner.ConfigError{Var: "MV_TRANSFORMER_CONCURRENCY", Value: strconv.Itoa(c.Concurrency), Reason: "must be a positive whole number"}
	}
	if c.Timeout < 0 {
		return &runner.ConfigError{Var: "MV_TRANSFORMER_TIMEOUT", Value: c.Timeout.String(), Reason: "must be a positive duration such as 30s, or 0 for none"}
	}
	if c.MaxReply <= 0 {
		return &runner.ConfigError{Var: "MV_TRANSFORMER_MAX_REPLY", Value: strconv.FormatInt(c.MaxReply, 10), Reason: "must be a positive number of bytes"}
	}
	return c.Config.Validate()
}

func init() {
	runner.RegisterTransformer(runner.Plugin[runner.Transformer]{
		Name:   "cloudevents",
		Config: func() any { return &Config{} },
		New: func(_ context.Context, env runner.Env, cfg any) (runner.Transformer, error) {
			return New(*cfg.(*Config), env.Name, env.Logger)
		},
	})
}

// Transformer calls a CloudEvents function for each message.
type Transformer struct {
	client *cemap.Client
	mapper *cemap.Mapper
	log    *zap.SugaredLogger
	// slots bounds the calls in flight across concurrent Transform calls.
	slots chan struct{}
}

var _ runner.Transformer = (*Transformer)(nil)

// New builds a transformer; name is MV_NAME (for the default event source).
func New(cfg Config, name string, log *zap.SugaredLogger) (*Transformer, error) {
	if err := cfg.Validate(runner.RoleTransformer); err != nil {
		return nil, err
	}
	if log == nil {
		log = zap.NewNop().Sugar()
	}
	mapper, err := cemap.New(cfg.Config, name, log)
	if err != nil {
		return nil, err
	}
	mode, _ := cemap.ParseMode(cfg.Mode)
	return &Transformer{
		client: cemap.NewClient(cemap.ClientOptions{
			URL: cfg.URL, Mode: mode, Timeout: cfg.Timeout, Concurrency: cfg.Concurrency,
			H2C: cfg.H2C, MaxReply: cfg.MaxReply,
			Header: http.Header{"Prefer": {"reply"}},
		}),
		mapper: mapper,
		log:    log,
		slots:  make(chan struct{}, cfg.Concurrency),
	}, nil
}

// Transform posts every message to the function, MV_TRANSFORMER_CONCURRENCY
// at a time, and returns one result per message in input order.
func (t *Transformer) Transform(ctx context.Context, msgs []*runner.Message) ([]runner.TransformResult, error) {
	results := make([]runner.TransformResult, len(msgs))
	errs := make([]error, len(msgs)) // transport errors, to tell "function away" apart
	started := cemap.Each(ctx, t.slots, len(msgs), func(i int) {
		results[i], errs[i] = t.call(ctx, msgs[i])
	})
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("cloudevents transformer: %d of %d calls cut short: %w", len(msgs)-started, len(msgs), err)
	}
	unreachable := 0
	for _, err := range errs {
		if cemap.IsUnreachable(err) {
			unreachable++
		}
	}
	if len(msgs) > 0 && unreachable == len(msgs) {
		return nil, fmt.Errorf("cloudevents transformer: function unreachable, check MV_TRANSFORMER_URL and that the function runs: %w", errs[0])
	}
	return results, nil
}

// call transforms one message; the error is the transport error, if any.
func (t *Transformer) call(ctx context.Context, m *runner.Message) (runner.TransformResult, error) {
	ev, err := t.mapper.ToEvent(m)
	if err != nil {
		return runner.TransformResult{Err: runner.Permanent(fmt.Errorf("cloudevents transformer: message %q: %w", m.ID, err))}, nil
	}
	resp, err := t.client.Post(ctx, &ev, true)
	if err != nil {
		var te *cemap.TransportError
		if errors.As(err, &te) {
			return runner.TransformResult{Err: fmt.Errorf("cloudevents transformer: message %q: %w", m.ID, err)}, err
		}
		return runner.TransformResult{Err: runner.Permanent(fmt.Errorf("cloudevents transformer: message %q: %w", m.ID, err))}, nil
	}
	return t.result(m, resp), nil
}

// result turns the function's answer into the message's outputs.
func (t *Transformer) result(m *runner.Message, resp *cemap.Response) runner.TransformResult {
	switch {
	case resp.Status == http.StatusAccepted:
		// Knative: a 202 is never a reply, whatever its body.
		return runner.TransformResult{}
	case resp.Status >= 200 && resp.Status < 300:
	case cemap.RetryableStatus(resp.Status):
		return runner.TransformResult{Err: fmt.Errorf("cloudevents transformer: message %q: %w", m.ID, cemap.NewStatusError(t.client.URL(), resp))}
	default:
		return runner.TransformResult{Err: runner.Permanent(fmt.Errorf("cloudevents transformer: message %q: %w", m.ID, cemap.NewStatusError(t.client.URL(), resp)))}
	}
	if !cemap.IsCloudEvent(resp.Header) && len(resp.Body) == 0 {
		return runner.TransformResult{}
	}
	events, err := cemap.ReadEvents(resp.Header, resp.Body)
	if err != nil {
		return runner.TransformResult{Err: runner.Permanent(fmt.Errorf("cloudevents transformer: message %q: function at %s answered %d with a body that is not a valid CloudEvent reply: %w", m.ID, t.client.URL(), resp.Status, err))}
	}
	outs := make([]*runner.Message, 0, len(events))
	for i := range events {
		o, err := cemap.ToMessage(&events[i])
		if err != nil {
			return runner.TransformResult{Err: runner.Permanent(fmt.Errorf("cloudevents transformer: message %q: reply: %w", m.ID, err))}
		}
		outs = append(outs, o)
	}
	return runner.TransformResult{Outputs: outs}
}

// Close drops the kept-alive connections.
func (t *Transformer) Close(context.Context) error {
	t.client.CloseIdle()
	return nil
}
