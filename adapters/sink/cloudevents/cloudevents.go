// Package cloudevents is a sink that delivers each message as a CloudEvent
// over HTTP: MV_SINK=cloudevents posts to K_SINK (which a Knative SinkBinding
// or ContainerSource injects, with K_CE_OVERRIDES), and
// MV_FALLBACK_SINK=cloudevents posts to MV_FALLBACK_SINK_URL.
//
// Delivery follows Knative's rules: only a 2xx answer is success (a reply
// event in it is ignored); 5xx, 404, 408, 409, 429, timeouts and connection
// errors are retried with the retry strategy; other 4xx and 3xx are
// permanent failures that MV_ON_FAILURE decides at once. A message that
// could not even connect (or whose TLS handshake met a server answering
// plain HTTP, or a certificate the runner does not trust) fails as
// runner.Unavailable: the engine retries it without spending its retry
// steps, so a broker restart or an https:// URL to a plain HTTP receiver
// does not send everything to the fallback sink. The log says once what the
// peer answered, and /readyz answers 503 until it answers HTTP again.
//
// A message answered permanently is not posted again within
// cewire.PermanentRetryFloor (1s), whatever MV_RETRY_INTERVAL says, so a
// redirect with MV_ON_FAILURE=retry cannot spin at the retry interval.
//
// The fallback sink's events carry Knative's dead-letter extensions
// (knativeerrordest, knativeerrorcode, knativeerrordata) describing the
// failure that sent each message there, as Knative's dispatcher adds them
// for a deadLetterSink (see cewire.SetDeadLetterExtensions).
//
// K_CE_OVERRIDES is read strictly: an unknown field (such as "extension"
// for "extensions") or anything after the object is a settings error.
package cloudevents

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"strconv"
	"time"

	"go.uber.org/zap"

	"github.com/monovertex/monovertex/adapters/internal/cewire"
	"github.com/monovertex/monovertex/runner"
)

// Config holds the sink's settings for every role.
type Config struct {
	// Roles is what each role reads: Knative's K_SINK and K_AUDIENCE and
	// MV_OIDC_TOKEN_PATH, and the fallback's and onSuccess sink's
	// MV_FALLBACK_SINK_URL, MV_ON_SUCCESS_SINK_URL and so on.
	runner.Roles[Target]
	Overrides          string         `envconfig:"K_CE_OVERRIDES" desc:"JSON {\"extensions\":{\"name\":\"value\"}} set on every delivered event; Knative sets it from spec.ceOverrides"`
	Mode               string         `envconfig:"MV_CE_SINK_MODE" default:"binary" desc:"CloudEvents content mode of deliveries: binary or structured"`
	Concurrency        int            `envconfig:"MV_CE_SINK_CONCURRENCY" default:"64" desc:"deliveries in flight at once, over kept-alive connections"`
	Timeout            *time.Duration `envconfig:"MV_CE_SINK_TIMEOUT" desc:"longest wait for one delivery, 0 for none; a timeout is retried (when unset: K_SINK_TIMEOUT, else 30s)"`
	SinkTimeout        *int           `envconfig:"K_SINK_TIMEOUT" desc:"Knative's bound of one delivery in whole seconds (0 for none), used when MV_CE_SINK_TIMEOUT is not set"`
	RetryAfterMax      time.Duration  `envconfig:"MV_CE_SINK_RETRY_AFTER_MAX" default:"60s" desc:"longest wait a 429 or 503 answer's Retry-After may impose before the retry (Knative's delivery.retryAfterMax); 0 ignores Retry-After"`
	OIDCServiceAccount string         `envconfig:"K_OIDC_SERVICE_ACCOUNT" desc:"service account, in NAMESPACE, whose tokens for K_AUDIENCE the runner requests (it needs create on serviceaccounts/token)"`
	H2C                bool           `envconfig:"MV_CE_SINK_H2C" default:"false" desc:"use HTTP/2 without TLS (h2c, prior knowledge) to an http:// URL"`
	cewire.Config
	// Connection takes the client's dial outcomes (set from runner.Env,
	// not from the environment).
	Connection runner.Connection `ignored:"true"`
}

// Target is what the sink reads for each role (see runner.RoleVar): the
// sink's variables keep the names Knative gives them.
type Target struct {
	URL       string `envconfig:"SINK_URL" sink:"K_SINK" desc:"where MV_SINK=cloudevents delivers events; Knative's SinkBinding and ContainerSource set it"`
	Audience  string `envconfig:"SINK_AUDIENCE" sink:"K_AUDIENCE" desc:"OIDC audience of K_SINK (its status.address.audience): with K_OIDC_SERVICE_ACCOUNT, every delivery to K_SINK carries a token for it from the TokenRequest API"`
	TokenPath string `envconfig:"OIDC_TOKEN_PATH" sink:"MV_OIDC_TOKEN_PATH" default:"/oidc/token" desc:"file of an OIDC token for K_SINK, read again as it is renewed: a projected service account token, or the Secret a SinkBinding mounts at /oidc; used when present and K_OIDC_SERVICE_ACCOUNT is not set (the fallback's and onSuccess sink's file must exist when named)"`
}

// RoleKind is empty: Target's derived variables are MV_FALLBACK_SINK_URL
// and the like, with no kind in their names.
func (Target) RoleKind() string { return "" }

// DefaultTimeout bounds a delivery when neither MV_CE_SINK_TIMEOUT nor
// K_SINK_TIMEOUT is set.
const DefaultTimeout = 30 * time.Second

// DeliveryTimeout is the bound of one delivery: MV_CE_SINK_TIMEOUT, else
// K_SINK_TIMEOUT (whole seconds, as Knative's adapters read it in
// pkg/adapter/v2/config.go GetSinktimeout), else DefaultTimeout; 0 means
// none.
func (c *Config) DeliveryTimeout() time.Duration {
	switch {
	case c.Timeout != nil:
		return *c.Timeout
	case c.SinkTimeout != nil:
		return time.Duration(*c.SinkTimeout) * time.Second
	}
	return DefaultTimeout
}

// oidc is the OIDC setting of a role: the audience of its URL and a
// token file, with the variables that set them; the file is optional
// (used only when present) where it has a default.
type oidc struct {
	audience, audienceVar, path, pathVar string
	pathOptional                         bool
}

// oidcOf is the OIDC setting of role; only the sink's token file, which
// has a default, is optional.
func (c *Config) oidcOf(role runner.Role) oidc {
	t := c.Of(role)
	return oidc{t.Audience, c.Var(&t.Audience), t.TokenPath, c.Var(&t.TokenPath), role == runner.RoleSink}
}

// validateOIDC checks that a role with an audience can get a token for
// it, and that a token file named on purpose exists.
func (c *Config) validateOIDC(role runner.Role) error {
	o := c.oidcOf(role)
	_, statErr := os.Stat(o.path)
	present := o.path != "" && statErr == nil
	if o.path != "" && !o.pathOptional && !present {
		return &runner.ConfigError{Var: o.pathVar, Value: o.path, Reason: fmt.Sprintf("cannot be read: %v", statErr)}
	}
	if o.audience != "" && c.OIDCServiceAccount == "" && !present {
		return &runner.ConfigError{Var: o.audienceVar, Value: o.audience, Reason: "needs a token: set K_OIDC_SERVICE_ACCOUNT (tokens from the TokenRequest API), or mount a projected service account token for this audience and name it with " + o.pathVar}
	}
	return nil
}

// tokenSource is where the OIDC token sent to the role's URL comes from,
// as Knative's adapters get theirs: with an audience and
// K_OIDC_SERVICE_ACCOUNT, the TokenRequest API (pkg/adapter/v2
// cloudevents.go withAuthHeader); else the token file, where one is
// mounted (for K_SINK by default a SinkBinding's /oidc/token; or a
// projected service account token); else none.
func (c *Config) tokenSource(role runner.Role) (cewire.TokenSource, error) {
	o := c.oidcOf(role)
	if o.audience != "" && c.OIDCServiceAccount != "" {
		in, err := cewire.FindInCluster(c.Namespace)
		if err != nil {
			return nil, &runner.ConfigError{Var: "K_OIDC_SERVICE_ACCOUNT", Value: c.OIDCServiceAccount, Reason: err.Error()}
		}
		return cewire.NewRequestedToken(in, c.OIDCServiceAccount, o.audience)
	}
	if o.path == "" {
		return nil, nil
	}
	if _, err := os.Stat(o.path); err != nil && o.pathOptional {
		return nil, nil
	}
	tok, err := cewire.NewFileToken(o.path)
	if err != nil {
		return nil, &runner.ConfigError{Var: o.pathVar, Value: o.path, Reason: err.Error()}
	}
	return tok, nil
}

// target returns the URL and the variable it comes from for a role.
func (c *Config) target(role runner.Role) (string, string) {
	t := c.Of(role)
	return t.URL, c.Var(&t.URL)
}

// Validate checks the URL of the role and K_CE_OVERRIDES.
func (c *Config) Validate(role runner.Role) error {
	target, variable := c.target(role)
	if target == "" {
		reason := "required with MV_SINK=cloudevents: bind the runner with a Knative SinkBinding, or set it to the URL of a Broker or any CloudEvents receiver"
		switch role {
		case runner.RoleFallbackSink:
			reason = "required with MV_FALLBACK_SINK=cloudevents: the URL of a CloudEvents receiver"
		case runner.RoleOnSuccessSink:
			reason = "required with MV_ON_SUCCESS_SINK=cloudevents: the URL of a CloudEvents receiver"
		}
		return &runner.ConfigError{Var: variable, Value: "", Reason: reason}
	}
	if u, err := url.Parse(target); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return &runner.ConfigError{Var: variable, Value: target, Reason: "must be an absolute http:// or https:// URL"}
	}
	if _, err := parseOverrides(c.Overrides); err != nil {
		return &runner.ConfigError{Var: "K_CE_OVERRIDES", Value: c.Overrides, Reason: err.Error()}
	}
	if _, err := cewire.ParseMode(c.Mode); err != nil {
		return &runner.ConfigError{Var: "MV_CE_SINK_MODE", Value: c.Mode, Reason: "must be binary or structured"}
	}
	if c.Concurrency <= 0 {
		return &runner.ConfigError{Var: "MV_CE_SINK_CONCURRENCY", Value: strconv.Itoa(c.Concurrency), Reason: "must be a positive whole number"}
	}
	if c.Timeout != nil && *c.Timeout < 0 {
		return &runner.ConfigError{Var: "MV_CE_SINK_TIMEOUT", Value: c.Timeout.String(), Reason: "must be a positive duration such as 30s, or 0 for none"}
	}
	if c.RetryAfterMax < 0 {
		return &runner.ConfigError{Var: "MV_CE_SINK_RETRY_AFTER_MAX", Value: c.RetryAfterMax.String(), Reason: "must be 0 (ignore Retry-After) or a positive duration such as 60s"}
	}
	if err := c.validateOIDC(role); err != nil {
		return err
	}
	if c.SinkTimeout != nil && *c.SinkTimeout < 0 {
		return &runner.ConfigError{Var: "K_SINK_TIMEOUT", Value: strconv.Itoa(*c.SinkTimeout), Reason: "must be whole seconds, 0 or more"}
	}
	return c.Config.Validate()
}

// overrides is Knative's CloudEventOverrides as K_CE_OVERRIDES carries it.
type overrides struct {
	Extensions map[string]string `json:"extensions"`
}

func parseOverrides(v string) (map[string]string, error) {
	if v == "" {
		return nil, nil
	}
	var o overrides
	dec := json.NewDecoder(bytes.NewReader([]byte(v)))
	dec.DisallowUnknownFields()
	err := dec.Decode(&o)
	if err == nil {
		if _, extra := dec.Token(); extra != io.EOF {
			err = errors.New("unexpected data after the JSON object")
		}
	}
	if err != nil {
		return nil, fmt.Errorf(`must be JSON like {"extensions":{"name":"value"}}: %v`, err)
	}
	for name := range o.Extensions {
		if !cewire.ValidExtensionName(name) {
			return nil, fmt.Errorf("extension name %q must be 1 to 20 lower-case letters or digits and not a CloudEvents attribute", name)
		}
	}
	return o.Extensions, nil
}

func init() {
	runner.RegisterSink("cloudevents", func(_ context.Context, env runner.Env, cfg *Config) (runner.Sink, error) {
		cfg.Connection = env.Connection
		return New(*cfg, env.Role, env.Name, env.Logger)
	})
}

// Sink delivers messages as CloudEvents.
type Sink struct {
	client    *cewire.Client
	mapper    *cewire.Mapper
	overrides map[string]string
	// deadLetters is set on the fallback sink: its events carry Knative's
	// knativeerror* extensions from the message's FallbackCause.
	deadLetters bool
	log         *zap.SugaredLogger
	// calls bounds the deliveries in flight across concurrent Write calls.
	calls *cewire.Calls
}

var (
	_ runner.Sink    = (*Sink)(nil)
	_ runner.Readier = (*Sink)(nil)
)

// New builds the sink for role (sink or fallback sink); name is MV_NAME.
func New(cfg Config, role runner.Role, name string, log *zap.SugaredLogger) (*Sink, error) {
	if err := cfg.Validate(role); err != nil {
		return nil, err
	}
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
	token, err := cfg.tokenSource(role)
	if err != nil {
		return nil, err
	}
	ov, _ := parseOverrides(cfg.Overrides)
	mode, _ := cewire.ParseMode(cfg.Mode)
	target, variable := cfg.target(role)
	return &Sink{
		client: cewire.NewClient(cewire.ClientOptions{
			URL: target, Mode: mode, Timeout: cfg.DeliveryTimeout(), Concurrency: cfg.Concurrency, H2C: cfg.H2C, Connection: cfg.Connection,
			RetryAfterMax: cfg.RetryAfterMax, Trust: trust, Token: token,
			Variable: variable, AudienceVar: cfg.Var(&cfg.Of(role).Audience), TokenPathVar: cfg.Var(&cfg.Of(role).TokenPath), Log: log,
		}),
		mapper:      mapper,
		overrides:   ov,
		deadLetters: role == runner.RoleFallbackSink,
		log:         log,
		calls:       cewire.NewCalls(cfg.Concurrency),
	}, nil
}

// Write delivers every message, MV_CE_SINK_CONCURRENCY at a time, and
// returns one result per message.
func (s *Sink) Write(ctx context.Context, msgs []*runner.Message) ([]runner.WriteResult, error) {
	results := make([]runner.WriteResult, len(msgs))
	started, err := s.calls.Run(ctx, msgs, func(i int) error {
		err := s.deliver(ctx, msgs[i])
		if err != nil {
			results[i] = runner.WriteResult{Status: runner.WriteFailed, Err: err}
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("cloudevents sink: %w", err)
	}
	for i := started; i < len(msgs); i++ {
		results[i] = runner.WriteResult{Status: runner.WriteFailed, Err: fmt.Errorf("cloudevents sink: message %q not sent: %w", msgs[i].ID, ctx.Err())}
	}
	if started == 0 && len(msgs) > 0 {
		return nil, fmt.Errorf("cloudevents sink: write of %d messages cut short: %w", len(msgs), ctx.Err())
	}
	return results, nil
}

// deliver posts one message; nil means the sink took it.
func (s *Sink) deliver(ctx context.Context, m *runner.Message) error {
	ev, err := s.mapper.ToEvent(m)
	if err != nil {
		return runner.Permanent(fmt.Errorf("cloudevents sink: message %q: %w", m.ID, err))
	}
	for name, value := range s.overrides {
		if err := ev.Context.SetExtension(name, value); err != nil {
			return runner.Permanent(fmt.Errorf("cloudevents sink: message %q: K_CE_OVERRIDES %s: %w", m.ID, name, err))
		}
	}
	if s.deadLetters {
		if err := cewire.SetDeadLetterExtensions(&ev, m.FallbackCause); err != nil {
			return runner.Permanent(fmt.Errorf("cloudevents sink: message %q: dead-letter extensions: %w", m.ID, err))
		}
	}
	resp, err := s.client.Post(ctx, &ev, false)
	if err != nil {
		return fmt.Errorf("cloudevents sink: message %q: %w", m.ID, cewire.PostError(err))
	}
	if err := s.client.CheckStatus(resp); err != nil {
		return fmt.Errorf("cloudevents sink: message %q: %w", m.ID, err)
	}
	return nil
}

// Ready is an error while the receiver cannot be reached (see
// cewire.Client.Ready), so /readyz tells what holds the messages.
func (s *Sink) Ready(ctx context.Context) error { return s.client.Ready(ctx) }

// Close drops the kept-alive connections.
func (s *Sink) Close(context.Context) error {
	s.calls.Stop()
	s.client.CloseIdle()
	return nil
}
