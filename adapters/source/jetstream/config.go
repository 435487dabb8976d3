package jetstream

import (
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/monovertex/monovertex/internal/natsjs"
	"github.com/monovertex/monovertex/runner"
)

// Config holds the JetStream source's settings.
type Config struct {
	URL           string        `envconfig:"MV_JETSTREAM_URL" desc:"NATS server URL, or a comma-separated list, e.g. nats://nats:4222"`
	Stream        string        `envconfig:"MV_JETSTREAM_STREAM" desc:"stream to read (must exist)"`
	Consumer      string        `envconfig:"MV_JETSTREAM_CONSUMER" desc:"durable pull consumer; created with explicit acks if missing, shared by all replicas"`
	FilterSubject string        `envconfig:"MV_JETSTREAM_FILTER_SUBJECT" desc:"subject filter of a consumer the runner creates; empty reads the whole stream"`
	DeliverPolicy string        `envconfig:"MV_JETSTREAM_DELIVER_POLICY" default:"all" desc:"where a consumer the runner creates starts, as Numaflow's deliver_policy: all, new, last, last_per_subject, by_start_sequence N or by_start_time EPOCH_MS"`
	AckWait       time.Duration `envconfig:"MV_JETSTREAM_ACK_WAIT" default:"30s" desc:"ack wait of a consumer the runner creates: unacked messages are redelivered after it"`
	MaxAckPending int           `envconfig:"MV_JETSTREAM_MAX_ACK_PENDING" default:"20000" desc:"max ack pending of a consumer the runner creates; at least replicas x MV_READ_BATCH_SIZE x MV_INFLIGHT_BATCHES"`
	NakDelay      time.Duration `envconfig:"MV_JETSTREAM_NAK_DELAY" default:"1s" desc:"delay before a nacked message is redelivered"`
	AckSync       bool          `envconfig:"MV_JETSTREAM_ACK_SYNC" default:"true" desc:"wait for the server to confirm every ack (double ack); false sends acks and only flushes the connection"`
	InProgress    bool          `envconfig:"MV_JETSTREAM_IN_PROGRESS" default:"true" desc:"tell the server that messages held longer than a third of the ack wait are still being worked on, so they are not redelivered meanwhile"`
	Creds         string        `envconfig:"MV_JETSTREAM_CREDS" desc:"NATS credentials file (JWT and NKey seed), if the server needs one"`
	ReconnectWait time.Duration `envconfig:"MV_JETSTREAM_RECONNECT_WAIT" default:"500ms" desc:"pause between reconnect attempts (the client reconnects for ever)"`
	APITimeout    time.Duration `envconfig:"MV_JETSTREAM_API_TIMEOUT" default:"5s" desc:"timeout of JetStream API calls and ack confirmations"`
	MissingWait   time.Duration `envconfig:"MV_JETSTREAM_CONSUMER_TIMEOUT" default:"60s" desc:"how long a deleted consumer the runner did not create may stay away before the runner exits 1 (0: at once); one the runner created is created again at once"`
	// Auth is TLS and the user, NKey or token, shared by every JetStream
	// connection of the runner.
	natsjs.Auth
	// Connection takes the connection's state changes (set from
	// runner.Env, not from the environment).
	Connection runner.Connection `ignored:"true"`
	// MessageIDs is how the runner forms message IDs (set from
	// runner.Env, not from the environment).
	MessageIDs runner.MessageIDs `ignored:"true"`
	// Replica is this runner's MV_REPLICA (set from runner.Env), which
	// numaflow-core's JetStream offsets carry.
	Replica int `ignored:"true"`
}

// Validate checks the values that parse but cannot be used.
func (c *Config) Validate(runner.Role) error {
	if strings.TrimSpace(c.URL) == "" {
		return &runner.ConfigError{Var: "MV_JETSTREAM_URL", Value: c.URL, Reason: "is required for MV_SOURCE=jetstream, e.g. nats://nats:4222"}
	}
	if err := natsjs.CheckURLs(c.URL); err != nil {
		return &runner.ConfigError{Var: "MV_JETSTREAM_URL", Value: c.URL, Reason: err.Error()}
	}
	switch {
	case !validName(c.Stream):
		return &runner.ConfigError{Var: "MV_JETSTREAM_STREAM", Value: c.Stream, Reason: "must name a stream: 1 to 255 bytes of printable text without spaces, '.', '*', '>', '/' or '\\'"}
	case !validName(c.Consumer):
		return &runner.ConfigError{Var: "MV_JETSTREAM_CONSUMER", Value: c.Consumer, Reason: "must name a durable consumer: 1 to 255 bytes of printable text without spaces, '.', '*', '>', '/' or '\\'"}
	case c.FilterSubject != "" && !validFilter(c.FilterSubject):
		return &runner.ConfigError{Var: "MV_JETSTREAM_FILTER_SUBJECT", Value: c.FilterSubject, Reason: "must be a subject such as orders.* or orders.>: dot-separated non-empty tokens without spaces, '*' and '>' only as whole tokens, '>' only last"}
	case c.MissingWait < 0:
		return &runner.ConfigError{Var: "MV_JETSTREAM_CONSUMER_TIMEOUT", Value: c.MissingWait.String(), Reason: "must be 0 (exit at once) or a positive duration such as 60s"}
	case natsjs.CheckDeliverPolicy(c.DeliverPolicy) != nil:
		return &runner.ConfigError{Var: "MV_JETSTREAM_DELIVER_POLICY", Value: c.DeliverPolicy, Reason: "must be all, new, last, last_per_subject, by_start_sequence N or by_start_time EPOCH_MS (Numaflow's deliver_policy)"}
	case c.AckWait < time.Second:
		return &runner.ConfigError{Var: "MV_JETSTREAM_ACK_WAIT", Value: c.AckWait.String(), Reason: "must be at least 1s"}
	case c.MaxAckPending < 1:
		return &runner.ConfigError{Var: "MV_JETSTREAM_MAX_ACK_PENDING", Value: strconv.Itoa(c.MaxAckPending), Reason: "must be a positive whole number"}
	case c.NakDelay < 0:
		return &runner.ConfigError{Var: "MV_JETSTREAM_NAK_DELAY", Value: c.NakDelay.String(), Reason: "must be 0 (redeliver at once) or a positive duration"}
	case c.ReconnectWait <= 0:
		return &runner.ConfigError{Var: "MV_JETSTREAM_RECONNECT_WAIT", Value: c.ReconnectWait.String(), Reason: "must be a positive duration such as 500ms"}
	case c.APITimeout <= 0:
		return &runner.ConfigError{Var: "MV_JETSTREAM_API_TIMEOUT", Value: c.APITimeout.String(), Reason: "must be a positive duration such as 5s"}
	}
	if err := c.Auth.Validate("MV_JETSTREAM_URL", c.URL); err != nil {
		return err
	}
	if c.Creds != "" && (c.HasIdentity() || natsjs.URLsCarryUser(c.URL)) {
		return &runner.ConfigError{Var: "MV_JETSTREAM_CREDS", Value: c.Creds, Reason: "cannot be used with MV_JETSTREAM_USER, _TOKEN, _NKEY_FILE or a user in MV_JETSTREAM_URL: the credentials file is an identity of its own; set one"}
	}
	return nil
}

// validName reports whether s can name a stream or consumer: the server
// refuses '.', '*', '>', path separators, names over 255 bytes, and stores
// control characters badly.
func validName(s string) bool {
	if s == "" || len(s) > 255 || !utf8.ValidString(s) || strings.ContainsAny(s, ".*>/\\") {
		return false
	}
	return printable(s)
}

// validFilter reports whether s is a subject a consumer can filter on.
func validFilter(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	tokens := strings.Split(s, ".")
	for i, t := range tokens {
		if t == "" || (t == ">" && i != len(tokens)-1) || !printable(t) {
			return false
		}
	}
	return true
}

// overlapsAny reports whether filter matches some subject one of subjects
// can hold. A stream without subjects of its own (a mirror, or one that
// only sources others) can hold any subject.
func overlapsAny(filter string, subjects []string) bool {
	if len(subjects) == 0 {
		return true
	}
	f := strings.Split(filter, ".")
	for _, s := range subjects {
		if subjectsOverlap(f, strings.Split(s, ".")) {
			return true
		}
	}
	return false
}

// subjectsOverlap reports whether some subject matches both a and b, given
// as tokens: NATS matching, where '*' is any one token and '>' one or more
// trailing tokens.
func subjectsOverlap(a, b []string) bool {
	for i := 0; ; i++ {
		if i == len(a) || i == len(b) {
			return len(a) == len(b)
		}
		if a[i] == ">" || b[i] == ">" {
			return true
		}
		if a[i] != b[i] && a[i] != "*" && b[i] != "*" {
			return false
		}
	}
}

// printable reports whether s has no white space and no control or other
// unprintable characters, which names and subjects may not hold.
func printable(s string) bool {
	for _, r := range s {
		if unicode.IsSpace(r) || !unicode.IsPrint(r) {
			return false
		}
	}
	return true
}
