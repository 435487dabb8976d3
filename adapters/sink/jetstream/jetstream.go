// Package jetstream is a sink publishing to a NATS JetStream stream
// (MV_SINK=jetstream, or MV_FALLBACK_SINK=jetstream).
//
// Every message is published with its ID as Nats-Msg-Id and counts as
// written only once the stream acknowledged it, so a message written twice
// (a redelivery after a crash, a retried batch) is stored once as long as
// the retry falls within the stream's Duplicates window (2 minutes by
// default). Keys, event time and headers travel as NATS headers (Mv-Keys,
// Mv-Event-Time, see internal/natsjs), which the JetStream source maps back.
package jetstream

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"go.uber.org/zap"

	"github.com/monovertex/monovertex/internal/natsjs"
	"github.com/monovertex/monovertex/runner"
)

// Config holds the JetStream sink's settings.
type Config struct {
	URL   string `envconfig:"MV_JETSTREAM_URL" desc:"NATS server URL, or a comma-separated list, e.g. nats://nats:4222"`
	Creds string `envconfig:"MV_JETSTREAM_CREDS" desc:"NATS credentials file (JWT and NKey seed), if the server needs one"`
	// Roles is what each role reads: MV_JETSTREAM_SUBJECT and
	// MV_JETSTREAM_SINK_*, and the fallback's and onSuccess sink's
	// MV_FALLBACK_JETSTREAM_* and MV_ON_SUCCESS_JETSTREAM_*.
	runner.Roles[Target]
	PublishTimeout time.Duration `envconfig:"MV_JETSTREAM_PUBLISH_TIMEOUT" default:"10s" desc:"how long a publish may wait for the stream's ack before it counts as failed and is retried"`
	MaxPending     int           `envconfig:"MV_JETSTREAM_PUBLISH_MAX_PENDING" default:"8192" desc:"most publishes awaiting their ack at once; more wait for room"`
	ReconnectWait  time.Duration `envconfig:"MV_JETSTREAM_RECONNECT_WAIT" default:"500ms" desc:"pause between reconnect attempts (the client reconnects for ever)"`
	// Auth is TLS and the user, NKey or token, shared by every JetStream
	// connection of the runner.
	natsjs.Auth `envconfig:"MV_JETSTREAM"`
	// Connection takes the connection's state changes (set from
	// runner.Env, not from the environment).
	Connection runner.Connection `ignored:"true"`
}

// Target is what the JetStream sink reads for each role (see
// runner.RoleVar); the sink's subject keeps its name MV_JETSTREAM_SUBJECT.
type Target struct {
	URL     string `envconfig:"URL" desc:"NATS server URL of the sink when it differs from the source's (another cluster); defaults to MV_JETSTREAM_URL; the fallback's and onSuccess sink's default to the sink's"`
	Subject string `envconfig:"SUBJECT" sink:"MV_JETSTREAM_SUBJECT" desc:"subject to publish to; a stream must capture it"`
	Creds   string `envconfig:"CREDS" desc:"credentials file for the sink's URL; defaults to MV_JETSTREAM_CREDS; the fallback's and onSuccess sink's default to the sink's"`
}

// RoleKind is the KIND in the names of Target's variables.
func (Target) RoleKind() string { return "JETSTREAM" }

// Validate checks the values that parse but cannot be used in role.
func (c *Config) Validate(role runner.Role) error {
	url, urlVar := c.url(role)
	t := c.Of(role)
	subject, subjectVar := t.Subject, c.Var(&t.Subject)
	if strings.TrimSpace(url) == "" {
		required := "MV_JETSTREAM_URL"
		if role != runner.RoleSink {
			required = c.Var(&t.URL)
		}
		return &runner.ConfigError{Var: required, Value: url, Reason: "is required for the jetstream sink, e.g. nats://nats:4222"}
	}
	if err := natsjs.CheckURLs(url); err != nil {
		return &runner.ConfigError{Var: urlVar, Value: url, Reason: err.Error()}
	}
	switch {
	case subject == "" || strings.ContainsAny(subject, " \t\r\n*>") || strings.HasPrefix(subject, ".") || strings.HasSuffix(subject, ".") || strings.Contains(subject, ".."):
		return &runner.ConfigError{Var: subjectVar, Value: subject, Reason: "must be a subject without wildcards, e.g. orders.processed"}
	case c.PublishTimeout <= 0:
		return &runner.ConfigError{Var: "MV_JETSTREAM_PUBLISH_TIMEOUT", Value: c.PublishTimeout.String(), Reason: "must be a positive duration such as 10s"}
	case c.MaxPending < 1:
		return &runner.ConfigError{Var: "MV_JETSTREAM_PUBLISH_MAX_PENDING", Value: strconv.Itoa(c.MaxPending), Reason: "must be a positive whole number"}
	case c.ReconnectWait <= 0:
		return &runner.ConfigError{Var: "MV_JETSTREAM_RECONNECT_WAIT", Value: c.ReconnectWait.String(), Reason: "must be a positive duration such as 500ms"}
	}
	if err := c.Auth.Validate(urlVar, url); err != nil {
		return err
	}
	if creds, credsVar := c.credentials(role); creds != "" && (c.HasIdentity() || natsjs.URLsCarryUser(url)) {
		return &runner.ConfigError{Var: credsVar, Value: creds, Reason: "cannot be used with MV_JETSTREAM_USER, _TOKEN, _NKEY_FILE or a user in " + urlVar + ": the credentials file is an identity of its own; set one (to give a sink another identity than the source's, put each in its own URL, user:pass@, instead of MV_JETSTREAM_USER or _TOKEN)"}
	}
	return nil
}

// target returns the URL and subject for role.
func (c *Config) target(role runner.Role) (url, subject string) {
	url, _ = c.url(role)
	return url, c.Of(role).Subject
}

// url returns the URL for role and the variable it comes from: the
// role's own, else the sink's own, else the one shared with the source.
func (c *Config) url(role runner.Role) (string, string) {
	if url, v := c.Inherit(role, func(t *Target) *string { return &t.URL }); url != "" {
		return url, v
	}
	return c.URL, "MV_JETSTREAM_URL"
}

func (c *Config) creds(role runner.Role) string {
	creds, _ := c.credentials(role)
	return creds
}

// credentials returns the credentials file for role and the variable it
// comes from, as url does.
func (c *Config) credentials(role runner.Role) (string, string) {
	if creds, v := c.Inherit(role, func(t *Target) *string { return &t.Creds }); creds != "" {
		return creds, v
	}
	return c.Creds, "MV_JETSTREAM_CREDS"
}

func init() {
	runner.RegisterSink("jetstream", func(_ context.Context, env runner.Env, cfg *Config) (runner.Sink, error) {
		cfg.Connection = env.Connection
		name := fmt.Sprintf("monovertex %s/%d %s", env.Name, env.Replica, env.Role)
		return New(*cfg, env.Role, name, env.Logger)
	})
}

// Sink publishes messages to one subject and waits for the stream's acks.
type Sink struct {
	subject string
	// dialer dials the server; nc and pub are set by Connect.
	dialer *natsjs.Dialer
	nc     *nats.Conn
	pub    *publisher
	// maxPending and timeout are MV_JETSTREAM_PUBLISH_MAX_PENDING and
	// MV_JETSTREAM_PUBLISH_TIMEOUT.
	maxPending int
	timeout    time.Duration
}

var (
	_ runner.Sink      = (*Sink)(nil)
	_ runner.Readier   = (*Sink)(nil)
	_ runner.Connector = (*Sink)(nil)
)

// New reads the TLS and NKey files and returns a sink for role, which
// talks to the server only from Connect on.
func New(cfg Config, role runner.Role, connName string, log *zap.SugaredLogger) (*Sink, error) {
	url, subject := cfg.target(role)
	d, err := natsjs.NewDialer(natsjs.ConnOptions{URL: url, Creds: cfg.creds(role), Auth: cfg.Auth, Name: connName, ReconnectWait: cfg.ReconnectWait, Logger: log, Connection: cfg.Connection})
	if err != nil {
		return nil, err
	}
	return &Sink{subject: subject, dialer: d, maxPending: cfg.MaxPending, timeout: cfg.PublishTimeout}, nil
}

// Connect dials the server. One that cannot be reached fails the
// attempt, and the engine tries again; once connected, outages are ridden
// out by reconnecting.
func (s *Sink) Connect(context.Context) error {
	if s.nc != nil {
		return nil
	}
	nc, err := s.dialer.Dial()
	if err != nil {
		return err
	}
	pub, err := newPublisher(nc, s.maxPending, s.timeout)
	if err != nil {
		nc.Close()
		return err
	}
	s.nc, s.pub = nc, pub
	return nil
}

// Write publishes every message, then waits for each ack.
// A message is reported written only when the stream acked it (a duplicate
// ack counts: the stream already has it); a failed or unanswered publish is
// reported failed and retried by the engine with the same Nats-Msg-Id.
func (s *Sink) Write(ctx context.Context, msgs []*runner.Message) ([]runner.WriteResult, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if len(msgs) == 0 {
		return nil, nil
	}
	// While disconnected, publishes would sit in the client's reconnect
	// buffer until their ack timeout; fail the call as unavailable instead,
	// and the engine paces its retries until the client is back.
	if !s.nc.IsConnected() {
		return nil, runner.Unavailable(fmt.Errorf("jetstream sink: publish %d messages to %s: not connected to NATS (%s), the client is reconnecting", len(msgs), s.subject, s.nc.Status()))
	}
	// The NATS messages and their header values come from slices made
	// once per write, and Nats-Msg-Id goes in with the other headers.
	nms := make([]nats.Msg, len(msgs))
	ptrs := make([]*nats.Msg, len(msgs))
	enc := natsjs.NewEncoder(len(msgs))
	for i, m := range msgs {
		nms[i] = nats.Msg{Subject: s.subject, Data: m.Value, Header: enc.Headers(m, m.ID)}
		ptrs[i] = &nms[i]
	}
	// A message that failed (timed out, or its write was cancelled) may
	// still be stored; its retry is then de-duplicated.
	results := make([]runner.WriteResult, len(msgs))
	for i, err := range s.pub.publish(ctx, ptrs) {
		if err != nil {
			results[i] = s.failed(msgs[i], err)
		}
	}
	return results, nil
}

func (s *Sink) failed(m *runner.Message, err error) runner.WriteResult {
	if errors.Is(err, errNoResponders) {
		err = fmt.Errorf("%w: %s", err, s.subject)
	}
	err = fmt.Errorf("jetstream sink: publish %s: %w", m.ID, err)
	if errors.Is(err, nats.ErrMaxPayload) {
		// Retrying cannot make it smaller; MV_ON_FAILURE decides.
		err = runner.Permanent(fmt.Errorf("%w (raise the server's max_payload or send smaller messages)", err))
	}
	return runner.WriteResult{Status: runner.WriteFailed, Err: err}
}

// Ready reports whether the connection to the server is up.
func (s *Sink) Ready(context.Context) error {
	if err := natsjs.StatusError(s.nc); err != nil {
		return fmt.Errorf("jetstream sink: %w", err)
	}
	return nil
}

// Close waits (bounded by ctx) for acks still outstanding, then closes the
// connection.
func (s *Sink) Close(ctx context.Context) error {
	if s.nc == nil {
		return nil // never connected
	}
	err := s.pub.drain(ctx)
	s.nc.Close()
	if err != nil {
		return fmt.Errorf("jetstream sink: %w", err)
	}
	return nil
}
