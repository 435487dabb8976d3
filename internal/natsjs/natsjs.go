// Package natsjs is the plumbing the JetStream source and sink share: how
// they connect (reconnecting for ever, logging state changes) and how a
// runner.Message maps to NATS headers and back, so that a JetStream source
// reading a stream the JetStream sink wrote gets the same keys, event time
// and headers.
//
// Header mapping (names are case-sensitive, as NATS headers are):
//
//	Mv-Keys        one value per key, in order (NATS headers are multi-valued,
//	               so keys need no escaping)
//	Mv-Event-Time  the event time, RFC 3339 with nanoseconds, UTC
//	Nats-Msg-Id    the message ID, set by the sink so the stream de-duplicates
//	               redeliveries within its Duplicates window
//	anything else  a user header, first value only
//
// The sink does not forward user headers named Nats-* (the server acts on
// some of them, e.g. Nats-Expected-Last-Sequence or Nats-TTL, which a message
// read from another stream must not trigger) nor Mv-* (reserved above).
package natsjs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"
	"go.uber.org/zap"

	"github.com/monovertex/monovertex/internal/peerauth"
	"github.com/monovertex/monovertex/runner"
)

// Header names of the mapping described in the package comment.
const (
	HeaderKeys      = "Mv-Keys"
	HeaderEventTime = "Mv-Event-Time"
	HeaderMsgID     = nats.MsgIdHdr // "Nats-Msg-Id"
)

// EncodeHeaders returns the NATS headers that carry m's keys, event time
// and user headers. The sink adds Nats-Msg-Id itself.
func EncodeHeaders(m *runner.Message) nats.Header {
	return NewEncoder(1).Headers(m, "")
}

// Encoder makes the headers of a batch of messages as EncodeHeaders does,
// with their values (and event times' text) taken from slices made once
// per batch rather than one or two allocations per header.
type Encoder struct {
	vals []string
	buf  []byte
}

// NewEncoder returns an Encoder sized for n messages.
func NewEncoder(n int) *Encoder {
	return &Encoder{vals: make([]string, 0, 4*n), buf: make([]byte, 0, 36*n)}
}

// one returns a one-value slice holding v, from e.vals.
func (e *Encoder) one(v string) []string {
	if len(e.vals) == cap(e.vals) {
		e.vals = make([]string, 0, max(64, 2*cap(e.vals)))
	}
	e.vals = append(e.vals, v)
	n := len(e.vals)
	return e.vals[n-1 : n : n]
}

// Headers returns m's NATS headers (EncodeHeaders), and Nats-Msg-Id set
// to id unless it is empty.
func (e *Encoder) Headers(m *runner.Message, id string) nats.Header {
	h := make(nats.Header, len(m.Headers)+3)
	for k, v := range m.Headers {
		if reserved(k) {
			continue
		}
		h[k] = e.one(v)
	}
	if len(m.Keys) > 0 {
		h[HeaderKeys] = append([]string(nil), m.Keys...)
	}
	if !m.EventTime.IsZero() {
		const room = len(time.RFC3339Nano) + 8
		if cap(e.buf)-len(e.buf) < room {
			e.buf = make([]byte, 0, max(room, 2*cap(e.buf), 1024))
		}
		start := len(e.buf)
		e.buf = m.EventTime.UTC().AppendFormat(e.buf, time.RFC3339Nano)
		// The bytes are never written again: a full buf moves on to a
		// new array.
		h[HeaderEventTime] = e.one(unsafe.String(&e.buf[start], len(e.buf)-start))
	}
	if id != "" {
		h[HeaderMsgID] = e.one(id)
	}
	return h
}

func reserved(name string) bool {
	return hasPrefixFold(name, "Nats-") || hasPrefixFold(name, "Mv-")
}

func hasPrefixFold(s, prefix string) bool {
	return len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix)
}

// DecodeHeaders fills m's keys, event time and headers from a stored
// message: keys from Mv-Keys (the runner's JetStream sink writes them),
// else none, as Numaflow's JetStream source gives none; event time from
// Mv-Event-Time, or stored (the time the stream stored the message, as
// Numaflow takes it); every other header, Nats-* included, as a user
// header with its first value.
func DecodeHeaders(m *runner.Message, h nats.Header, stored time.Time) {
	m.EventTime = stored
	if keys, ok := h[HeaderKeys]; ok {
		m.Keys = append([]string(nil), keys...)
	}
	if v := h.Get(HeaderEventTime); v != "" {
		if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
			m.EventTime = t
		}
	}
	for k, vs := range h {
		if k == HeaderKeys || k == HeaderEventTime || len(vs) == 0 {
			continue
		}
		if m.Headers == nil {
			m.Headers = make(map[string]string, len(h))
		}
		m.Headers[k] = vs[0]
	}
}

// Auth is how the runner proves itself to a NATS server: Numaflow's
// jetstream tls and auth (basic, nkey, token), with files in place of the
// TLS and NKey Secret selectors (mount the Secret and name the files) and
// variables for the user, password and token (secretKeyRef). The JetStream
// source and sink embed it under MV_JETSTREAM, so every JetStream
// connection of the runner uses it; the NATS source under MV_NATS.
type Auth struct {
	peerauth.TLSFiles
	NKeyFile string `envconfig:"NKEY_FILE" desc:"file holding a user NKey seed (SU...) to authenticate with, as Numaflow's auth.nkey"`
	// Basic is the user and password, as Numaflow's auth.basic.
	peerauth.Basic
	Token string `envconfig:"TOKEN" desc:"token to authenticate with (Numaflow's auth.token; trimmed)"`
	// Prefix starts the names of the variables errors name: MV_JETSTREAM
	// when empty; the NATS source's are MV_NATS_*. The settings that embed
	// Auth tag it with the same prefix.
	Prefix string `ignored:"true"`
}

func (a *Auth) prefix() string {
	if a.Prefix == "" {
		return "MV_JETSTREAM"
	}
	return a.Prefix
}

// Validate checks that the TLS files pair up and parse, that at most one
// identity is given (a user and password, an NKey or a token, and none of
// them besides one in urls, the value of urlVar), and that the NKey file
// holds a user seed.
func (a *Auth) Validate(urlVar, urls string) error {
	if err := a.TLSFiles.Validate(a.prefix()); err != nil {
		return err
	}
	user, password, token := a.secrets()
	switch p := a.prefix(); {
	case a.User != "" && user == "":
		return &runner.ConfigError{Var: p + "_USER", Value: a.User, Reason: "is only white space"}
	case a.Password != "" && password == "":
		return &runner.ConfigError{Var: p + "_PASSWORD", Value: "(hidden)", Reason: "is only white space"}
	case a.Token != "" && token == "":
		return &runner.ConfigError{Var: p + "_TOKEN", Value: "(hidden)", Reason: "is only white space"}
	case user != "" && password == "":
		return &runner.ConfigError{Var: p + "_PASSWORD", Value: "", Reason: "is required with " + p + "_USER (a user and password, as Numaflow's auth.basic)"}
	case password != "" && user == "":
		return &runner.ConfigError{Var: p + "_USER", Value: "", Reason: "is required with " + p + "_PASSWORD (a user and password, as Numaflow's auth.basic)"}
	case user != "" && token != "":
		return &runner.ConfigError{Var: p + "_TOKEN", Value: "(hidden)", Reason: "cannot be used with " + p + "_USER: set a user and password or a token, not both"}
	case a.NKeyFile != "" && (user != "" || token != ""):
		return &runner.ConfigError{Var: p + "_NKEY_FILE", Value: a.NKeyFile, Reason: "cannot be used with " + p + "_USER or _TOKEN: set one identity"}
	case (user != "" || token != "" || a.NKeyFile != "") && URLsCarryUser(urls):
		// nats.go would send the URL's and never the NKey.
		v, val := p+"_USER", user
		switch {
		case token != "":
			v, val = p+"_TOKEN", "(hidden)"
		case user == "":
			v, val = p+"_NKEY_FILE", a.NKeyFile
		}
		return &runner.ConfigError{Var: v, Value: val, Reason: "cannot be used with a user or token in " + urlVar + ": set one identity"}
	}
	if a.NKeyFile == "" {
		return nil
	}
	kp, err := a.nkey()
	if err != nil {
		return err
	}
	kp.Wipe()
	return nil
}

// HasIdentity reports whether a user, token or NKey is set (after
// trimming), for the callers' checks against a credentials file.
func (a *Auth) HasIdentity() bool {
	user, _, token := a.secrets()
	return user != "" || token != "" || a.NKeyFile != ""
}

// secrets returns the user, password and token, trimmed as Numaflow reads
// a Secret's value.
func (a *Auth) secrets() (user, password, token string) {
	user, password = a.Basic.Trimmed()
	return user, password, strings.TrimSpace(a.Token)
}

// URLsCarryUser reports whether any URL of a comma-separated list holds a
// user or token (nats://user:pass@host, nats://token@host).
func URLsCarryUser(list string) bool {
	for _, raw := range strings.Split(list, ",") {
		raw = strings.TrimSpace(raw)
		if !strings.Contains(raw, "://") {
			raw = "nats://" + raw
		}
		if u, err := url.Parse(raw); err == nil && u.User != nil {
			return true
		}
	}
	return false
}

// nkey reads the user NKey seed, without the white space around it (as
// Numaflow reads a Secret's value).
func (a *Auth) nkey() (nkeys.KeyPair, error) {
	b, err := os.ReadFile(a.NKeyFile)
	if err != nil {
		return nil, &runner.ConfigError{Var: a.prefix() + "_NKEY_FILE", Value: a.NKeyFile, Reason: "cannot be read: " + err.Error()}
	}
	kp, err := nkeys.FromSeed(bytes.TrimSpace(b))
	if err != nil {
		return nil, &runner.ConfigError{Var: a.prefix() + "_NKEY_FILE", Value: a.NKeyFile, Reason: "holds no NKey seed: " + err.Error()}
	}
	if pub, err := kp.PublicKey(); err != nil || !nkeys.IsValidPublicUserKey(pub) {
		kp.Wipe()
		return nil, &runner.ConfigError{Var: a.prefix() + "_NKEY_FILE", Value: a.NKeyFile, Reason: "holds a seed that is not a user's (SU...)"}
	}
	return kp, nil
}

// options are the client options for TLS and the identity.
func (a *Auth) options() ([]nats.Option, error) {
	var opts []nats.Option
	tc, err := a.TLSFiles.Config(a.prefix(), true)
	if err != nil {
		return nil, err
	}
	if tc != nil {
		opts = append(opts, nats.Secure(tc))
	}
	if a.NKeyFile != "" {
		kp, err := a.nkey()
		if err != nil {
			return nil, err
		}
		pub, _ := kp.PublicKey() // checked by nkey
		// The key pair lives as long as the connection: it signs the
		// server's challenge at every reconnect.
		opts = append(opts, nats.Nkey(pub, kp.Sign))
	}
	switch user, password, token := a.secrets(); {
	case user != "":
		opts = append(opts, nats.UserInfo(user, password))
	case token != "":
		opts = append(opts, nats.Token(token))
	}
	return opts, nil
}

// ConnOptions say how to reach the NATS server.
type ConnOptions struct {
	// Auth is the TLS and NKey setting.
	Auth Auth
	// URL is one server URL or a comma-separated list (nats://host:4222).
	URL string
	// Creds is a NATS credentials file (JWT and NKey seed); empty for none.
	Creds string
	// Name shows up in the server's connection list (nats server report connections).
	Name string
	// ReconnectWait is the pause between reconnect attempts.
	ReconnectWait time.Duration
	// PingInterval, when set, is how often the client pings the server
	// (two missed pings end the connection); nats.go's default is 2 minutes.
	PingInterval time.Duration
	// SyncQueueLen, when set, bounds the messages a sync subscription
	// buffers (nats.go's default is 65,536).
	SyncQueueLen int
	// Logger receives connection state changes; nil discards them.
	Logger *zap.SugaredLogger
	// Connection takes the same changes for the monovtx_connection_*
	// metrics; nil reports nothing. The first connection is not reported
	// here: Connect is called from an adapter's runner.Connector, whose
	// attempts the engine reports.
	Connection runner.Connection
}

// Connect dials the server (NewDialer, then Dial).
func Connect(o ConnOptions) (*nats.Conn, error) {
	d, err := NewDialer(o)
	if err != nil {
		return nil, err
	}
	return d.Dial()
}

// Dialer dials one server (or cluster) with options checked before: an
// adapter's constructor makes it, so files that cannot be used (TLS, an
// NKey seed) exit 2 at start, and its Connect dials.
type Dialer struct {
	url, prefix string
	opts        []nats.Option
}

// NewDialer checks o and reads its files; a file that cannot be used is a
// *runner.ConfigError naming its variable.
func NewDialer(o ConnOptions) (*Dialer, error) {
	log := o.Logger
	if log == nil {
		log = zap.NewNop().Sugar()
	}
	conn := o.Connection
	if conn == nil {
		conn = runner.NoConnection
	}
	opts := []nats.Option{
		nats.Name(o.Name),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(o.ReconnectWait),
		nats.DisconnectErrHandler(func(nc *nats.Conn, err error) {
			if nc.IsClosed() {
				// Closed by the runner (the callback runs after the
				// close): no loss, and no line beside a refused
				// setting's one.
				return
			}
			conn.Lost(err)
			log.Warnw("disconnected from NATS, reconnecting", "error", err)
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			conn.Up()
			log.Infow("reconnected to NATS", "server", nc.ConnectedUrlRedacted())
		}),
		nats.ReconnectErrHandler(func(_ *nats.Conn, err error) {
			conn.Failed(err)
		}),
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			subject := ""
			if sub != nil {
				subject = sub.Subject
			}
			log.Warnw("NATS async error", "subject", subject, "error", err)
		}),
	}
	if o.Creds != "" {
		opts = append(opts, nats.UserCredentials(o.Creds))
	}
	if o.PingInterval > 0 {
		opts = append(opts, nats.PingInterval(o.PingInterval))
	}
	if o.SyncQueueLen > 0 {
		opts = append(opts, nats.SyncQueueLen(o.SyncQueueLen))
	}
	auth, err := o.Auth.options()
	if err != nil {
		return nil, err
	}
	return &Dialer{url: o.URL, prefix: o.Auth.prefix(), opts: append(opts, auth...)}, nil
}

// Dial connects. The connection reconnects for ever on its own: an outage
// only makes calls fail (and the engine retry them) until the server is
// back, it never ends the runner.
func (d *Dialer) Dial() (*nats.Conn, error) {
	nc, err := nats.Connect(d.url, d.opts...)
	if err != nil {
		return nil, fmt.Errorf("connect to NATS at %s: %w (%s)", redact(d.url), err, connectHint(err, d.prefix))
	}
	return nc, nil
}

// connectHint says what to check after a failed connect.
func connectHint(err error, prefix string) string {
	switch msg := strings.ToLower(err.Error()); {
	case errors.Is(err, nats.ErrAuthorization) || strings.Contains(msg, "authorization"):
		hint := "the server refused the client's identity: check " + prefix + "_USER and " + prefix + "_PASSWORD, " + prefix + "_TOKEN, " + prefix + "_NKEY_FILE"
		if prefix == "MV_JETSTREAM" {
			hint += " or MV_JETSTREAM_CREDS"
		}
		return hint
	case errors.Is(err, nats.ErrSecureConnWanted):
		return "the runner asked for TLS (" + prefix + "_TLS*) and the server does not offer it: check the URL's port, or turn TLS off"
	case errors.Is(err, nats.ErrSecureConnRequired) || strings.Contains(msg, "tls:") || strings.Contains(msg, "tls error") || strings.Contains(msg, "x509:"):
		return "TLS failed: check " + prefix + "_TLS_CA_FILE against the server's CA and, if it wants one, the client certificate in " + prefix + "_TLS_CERT_FILE and _KEY_FILE"
	}
	return "check the URL and that the server is up"
}

// redact hides passwords and tokens in URLs before they reach a log line.
func redact(urls string) string {
	parts := strings.Split(urls, ",")
	for i, p := range parts {
		if at := strings.LastIndex(p, "@"); at >= 0 {
			if scheme := strings.Index(p, "://"); scheme >= 0 && scheme < at {
				parts[i] = p[:scheme+3] + "***" + p[at:]
			}
		}
	}
	return strings.Join(parts, ",")
}

// StatusError says why a connection cannot take work now, or nil if it can.
func StatusError(nc *nats.Conn) error {
	if st := nc.Status(); st != nats.CONNECTED {
		return fmt.Errorf("NATS connection is %s; it reconnects on its own", statusName(st))
	}
	return nil
}

func statusName(s nats.Status) string {
	return strings.ToLower(s.String())
}

// WaitConnected waits up to d (or until ctx is done) for nc to be connected
// and returns StatusError then. Adapters call it before failing a call for
// want of a connection, so that during an outage each call fails after a
// pause instead of at once, and the engine's retries do not spin.
func WaitConnected(ctx context.Context, nc *nats.Conn, d time.Duration) error {
	if nc.IsConnected() || d <= 0 {
		return StatusError(nc)
	}
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	deadline := time.Now().Add(d)
	for !nc.IsConnected() && !nc.IsClosed() && time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return StatusError(nc)
		case <-t.C:
		}
	}
	return StatusError(nc)
}

// ParseDeliverPolicy reads a deliver policy as numaflow-nats reads Numaflow's
// deliver_policy: words split on white space, in any case; empty is all;
// a start time is milliseconds since the epoch.
func ParseDeliverPolicy(s string) (jetstream.DeliverPolicy, uint64, *time.Time, error) {
	f := strings.Fields(strings.ToLower(s))
	switch {
	case len(f) == 0 || len(f) == 1 && f[0] == "all":
		return jetstream.DeliverAllPolicy, 0, nil, nil
	case len(f) == 1 && f[0] == "new":
		return jetstream.DeliverNewPolicy, 0, nil, nil
	case len(f) == 1 && f[0] == "last":
		return jetstream.DeliverLastPolicy, 0, nil, nil
	case len(f) == 1 && f[0] == "last_per_subject":
		return jetstream.DeliverLastPerSubjectPolicy, 0, nil, nil
	case len(f) == 2 && f[0] == "by_start_sequence":
		seq, err := strconv.ParseUint(f[1], 10, 64)
		if err != nil {
			return 0, 0, nil, fmt.Errorf("start sequence %q is not a whole number", f[1])
		}
		return jetstream.DeliverByStartSequencePolicy, seq, nil, nil
	case len(f) == 2 && f[0] == "by_start_time":
		ms, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil {
			return 0, 0, nil, fmt.Errorf("start time %q is not milliseconds since the epoch", f[1])
		}
		t := time.UnixMilli(ms).UTC()
		return jetstream.DeliverByStartTimePolicy, 0, &t, nil
	}
	return 0, 0, nil, fmt.Errorf("unknown deliver policy %q", s)
}

// CheckDeliverPolicy reports why s is not a deliver policy, or nil.
func CheckDeliverPolicy(s string) error {
	_, _, _, err := ParseDeliverPolicy(s)
	return err
}
