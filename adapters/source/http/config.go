package http

import (
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/monovertex/monovertex/adapters/internal/cewire"
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
