// Package kafkaconn holds the connection settings the Kafka source and sink
// share (brokers, SASL, TLS) and turns them into franz-go client options.
package kafkaconn

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/oauth"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
	"go.uber.org/zap"

	"github.com/monovertex/monovertex/internal/peerauth"
	"github.com/monovertex/monovertex/runner"
)

// Auth is how the runner authenticates to the brokers: Numaflow's
// spec.source.kafka.sasl and .tls, with files in place of Secret selectors
// (mount the Secret and name the files). The Kafka source and sink embed
// it under MV_KAFKA.
type Auth struct {
	SASLMechanism string `envconfig:"SASL_MECHANISM" desc:"SASL mechanism: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER; empty for none"`
	// SASL is the user and password of PLAIN and SCRAM.
	SASL          peerauth.Basic `envconfig:"SASL"`
	OAuthClientID string         `envconfig:"SASL_OAUTH_CLIENT_ID" desc:"OAUTHBEARER: OAuth 2 client ID, for the client credentials grant at MV_KAFKA_SASL_OAUTH_TOKEN_ENDPOINT (trimmed)"`
	OAuthSecret   string         `envconfig:"SASL_OAUTH_CLIENT_SECRET" desc:"OAUTHBEARER: the client's secret (trimmed)"`
	OAuthEndpoint string         `envconfig:"SASL_OAUTH_TOKEN_ENDPOINT" desc:"OAUTHBEARER: the http or https URL tokens are asked from, as Numaflow's sasl.oauth.tokenEndpoint (librdkafka's OIDC method)"`
	peerauth.TLSFiles
}

// Validate checks the authentication settings.
func (a *Auth) Validate() error {
	user, _ := a.sasl()
	oauthSet := a.OAuthClientID != "" || a.OAuthSecret != "" || a.OAuthEndpoint != ""
	switch {
	case a.SASLMechanism == "OAUTHBEARER" && user != "":
		return &runner.ConfigError{Var: "MV_KAFKA_SASL_USER", Value: a.SASL.User, Reason: "is not used with MV_KAFKA_SASL_MECHANISM=OAUTHBEARER, which takes MV_KAFKA_SASL_OAUTH_*: unset one"}
	case a.SASLMechanism != "OAUTHBEARER" && oauthSet:
		return &runner.ConfigError{Var: "MV_KAFKA_SASL_MECHANISM", Value: a.SASLMechanism, Reason: "must be OAUTHBEARER when MV_KAFKA_SASL_OAUTH_* are set"}
	}
	switch a.SASLMechanism {
	case "":
		if user != "" {
			return &runner.ConfigError{Var: "MV_KAFKA_SASL_MECHANISM", Value: a.SASLMechanism, Reason: "is required when MV_KAFKA_SASL_USER is set: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512"}
		}
	case "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512":
		if user == "" {
			return &runner.ConfigError{Var: "MV_KAFKA_SASL_USER", Value: a.SASL.User, Reason: "is required with MV_KAFKA_SASL_MECHANISM=" + a.SASLMechanism}
		}
	case "OAUTHBEARER":
		id, secret := a.oauthClient()
		switch {
		case id == "":
			return &runner.ConfigError{Var: "MV_KAFKA_SASL_OAUTH_CLIENT_ID", Value: a.OAuthClientID, Reason: "is required with MV_KAFKA_SASL_MECHANISM=OAUTHBEARER"}
		case secret == "":
			return &runner.ConfigError{Var: "MV_KAFKA_SASL_OAUTH_CLIENT_SECRET", Value: "", Reason: "is required with MV_KAFKA_SASL_MECHANISM=OAUTHBEARER"}
		}
		if err := CheckTokenEndpoint(a.OAuthEndpoint); err != nil {
			return &runner.ConfigError{Var: "MV_KAFKA_SASL_OAUTH_TOKEN_ENDPOINT", Value: redactURL(a.OAuthEndpoint), Reason: err.Error()}
		}
	default:
		return &runner.ConfigError{Var: "MV_KAFKA_SASL_MECHANISM", Value: a.SASLMechanism, Reason: "must be PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER (GSSAPI is not supported)"}
	}
	return a.TLSFiles.Validate("MV_KAFKA")
}

// sasl returns the SASL user and password, trimmed.
func (a *Auth) sasl() (user, password string) { return a.SASL.Trimmed() }

// Opts returns the client options for the brokers and the authentication.
func (a *Auth) Opts(brokers []string) ([]kgo.Opt, error) {
	opts := []kgo.Opt{kgo.SeedBrokers(brokers...)}
	user, password := a.sasl()
	switch a.SASLMechanism {
	case "PLAIN":
		opts = append(opts, kgo.SASL(plain.Auth{User: user, Pass: password}.AsMechanism()))
	case "SCRAM-SHA-256":
		opts = append(opts, kgo.SASL(scram.Auth{User: user, Pass: password}.AsSha256Mechanism()))
	case "SCRAM-SHA-512":
		opts = append(opts, kgo.SASL(scram.Auth{User: user, Pass: password}.AsSha512Mechanism()))
	case "OAUTHBEARER":
		id, secret := a.oauthClient()
		ts := &tokenSource{endpoint: a.OAuthEndpoint, id: id, secret: secret, client: &http.Client{Timeout: 30 * time.Second}}
		opts = append(opts, kgo.SASL(oauth.Oauth(ts.auth)))
	}
	tc, err := a.TLSFiles.Config("MV_KAFKA", false)
	if err != nil {
		return nil, err
	}
	if tc != nil {
		opts = append(opts, kgo.DialTLSConfig(tc))
	}
	return opts, nil
}

// Brokers splits a comma-separated broker list and checks that every entry
// is host:port, so that a typo is a setting error rather than a broker
// that seems down.
func Brokers(variable, list string) ([]string, error) {
	var out []string
	for _, b := range strings.Split(list, ",") {
		b = strings.TrimSpace(b)
		if b == "" {
			continue
		}
		host, port, err := net.SplitHostPort(b)
		if err != nil || host == "" {
			return nil, &runner.ConfigError{Var: variable, Value: list, Reason: fmt.Sprintf("%q is not host:port, e.g. kafka:9092", b)}
		}
		if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
			return nil, &runner.ConfigError{Var: variable, Value: list, Reason: fmt.Sprintf("%q: the port must be between 1 and 65535", b)}
		}
		out = append(out, b)
	}
	if len(out) == 0 {
		return nil, &runner.ConfigError{Var: variable, Value: list, Reason: "names no broker, e.g. kafka-0:9092,kafka-1:9092"}
	}
	return out, nil
}

// ValidTopic reports whether s can name a Kafka topic: 1 to 249 of
// [a-zA-Z0-9._-], and neither "." nor "..".
func ValidTopic(s string) bool {
	if s == "" || len(s) > 249 || s == "." || s == ".." {
		return false
	}
	for _, r := range s {
		if !(r == '.' || r == '_' || r == '-' || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') || (r >= '0' && r <= '9')) {
			return false
		}
	}
	return true
}

// CheckTopic asks the brokers for the topic's end offsets: it fails if no
// broker answers, and names the variable if the topic does not exist. A
// topic reported missing is asked for again for a few seconds first: a
// topic created a moment ago may not be in every broker's metadata yet.
func CheckTopic(ctx context.Context, adm *kadm.Client, topic, variable string) error {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	for attempt := 0; ; attempt++ {
		ends, err := adm.ListEndOffsets(ctx, topic)
		if err == nil {
			err = ends.Error()
		}
		missing := errors.Is(err, kerr.UnknownTopicOrPartition) || (err == nil && len(ends[topic]) == 0)
		if !missing {
			if err != nil {
				return fmt.Errorf("kafka: list offsets of topic %q (are the brokers reachable, and SASL/TLS set as they expect?): %w", topic, err)
			}
			return nil
		}
		if attempt == 10 || ctx.Err() != nil {
			return &runner.ConfigError{Var: variable, Value: topic, Reason: "the topic does not exist on the brokers: create it or name an existing one"}
		}
		select {
		case <-time.After(300 * time.Millisecond):
		case <-ctx.Done():
		}
	}
}

// Logger passes the client's warnings and errors to the runner's log.
func Logger(log *zap.SugaredLogger) kgo.Logger { return zapLogger{log} }

type zapLogger struct{ log *zap.SugaredLogger }

func (l zapLogger) Level() kgo.LogLevel { return kgo.LogLevelWarn }

func (l zapLogger) Log(level kgo.LogLevel, msg string, keyvals ...any) {
	switch level {
	case kgo.LogLevelError:
		l.log.Errorw("kafka client: "+msg, keyvals...)
	case kgo.LogLevelWarn:
		l.log.Warnw("kafka client: "+msg, keyvals...)
	}
}
