package kafkaconn

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/sasl/oauth"
)

// oauthClient returns the OAuth client ID and secret without the white
// space around them, as numaflow-core reads a Secret's value.
func (a *Auth) oauthClient() (id, secret string) {
	return strings.TrimSpace(a.OAuthClientID), strings.TrimSpace(a.OAuthSecret)
}

// CheckTokenEndpoint checks that raw is an http or https URL with a host.
func CheckTokenEndpoint(raw string) error {
	u, err := url.Parse(strings.TrimSpace(raw))
	switch {
	case raw == "":
		return errors.New("is required with MV_KAFKA_SASL_MECHANISM=OAUTHBEARER, e.g. https://idp.example.com/oauth2/token")
	case err != nil:
		return fmt.Errorf("is not a URL: %v", errors.Unwrap(err))
	case u.Scheme != "http" && u.Scheme != "https":
		return errors.New("must be an http or https URL")
	case u.Host == "":
		return errors.New("has no host")
	}
	return nil
}

// tokenSource gets OAUTHBEARER tokens with the OAuth 2 client credentials
// grant, as librdkafka's OIDC method (Numaflow's sasl.oauth) asks for
// them: a form POST of grant_type=client_credentials with the client ID
// and secret in Basic authentication. A token is kept until 80 % of its
// lifetime has passed (librdkafka refreshes at 80 % too): the JWT's exp,
// or the answer's expires_in if shorter or the token is not a JWT. Unlike
// librdkafka, which takes only JWTs, an opaque token is used, and one
// without a lifetime is asked for again at every authentication.
//
// Connections that authenticate while a grant is under way wait for it
// (or their context) and share its answer, token or error, rather than
// asking one after another.
type tokenSource struct {
	endpoint, id, secret string
	client               *http.Client

	mu      sync.Mutex
	token   string
	renewAt time.Time
	flight  *tokenFlight // the grant under way, nil for none
}

// tokenFlight is one grant request and its answer, for every caller that
// waits on it.
type tokenFlight struct {
	done  chan struct{}
	token string
	err   error
}

// auth is franz-go's OAUTHBEARER callback, called for every connection and
// reauthentication.
func (s *tokenSource) auth(ctx context.Context) (oauth.Auth, error) {
	s.mu.Lock()
	if s.token != "" && time.Now().Before(s.renewAt) {
		tok := s.token
		s.mu.Unlock()
		return oauth.Auth{Token: tok}, nil
	}
	f := s.flight
	if f == nil {
		f = &tokenFlight{done: make(chan struct{})}
		s.flight = f
		go s.grant(f)
	}
	s.mu.Unlock()
	select {
	case <-f.done:
		if f.err != nil {
			return oauth.Auth{}, f.err
		}
		return oauth.Auth{Token: f.token}, nil
	case <-ctx.Done():
		return oauth.Auth{}, fmt.Errorf("kafka: waiting for an OAuth token from %s: %w", redactURL(s.endpoint), ctx.Err())
	}
}

// grant runs one flight's request (bounded by the client's timeout, not by
// any one caller's context) and publishes its answer.
func (s *tokenSource) grant(f *tokenFlight) {
	tok, lifetime, err := s.fetch(context.Background())
	s.mu.Lock()
	f.token, f.err = tok, err
	if err == nil {
		s.token, s.renewAt = tok, time.Now().Add(lifetime*8/10)
	}
	s.flight = nil
	s.mu.Unlock()
	close(f.done)
}

// fetch asks the endpoint for a token and returns it with its lifetime (0
// when the answer says none).
func (s *tokenSource) fetch(ctx context.Context) (string, time.Duration, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSpace(s.endpoint), strings.NewReader("grant_type=client_credentials"))
	if err != nil {
		return "", 0, fmt.Errorf("kafka: OAuth token request to %s: %w", redactURL(s.endpoint), err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Accept", "application/json")
	req.Header.Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(s.id+":"+s.secret)))
	resp, err := s.client.Do(req)
	if ue := (*url.Error)(nil); errors.As(err, &ue) {
		err = ue.Err // without the URL, whose query may hold a secret
	}
	if err != nil {
		return "", 0, fmt.Errorf("kafka: OAuth token request to %s (check MV_KAFKA_SASL_OAUTH_TOKEN_ENDPOINT): %w", redactURL(s.endpoint), err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return "", 0, fmt.Errorf("kafka: OAuth token answer from %s: %w", redactURL(s.endpoint), err)
	}
	if resp.StatusCode != http.StatusOK {
		// The error field of RFC 6749 5.2 says why; the body can hold no
		// secret of ours.
		var e struct {
			Error string `json:"error"`
			Desc  string `json:"error_description"`
		}
		_ = json.Unmarshal(body, &e)
		why := strings.TrimSpace(e.Error + " " + e.Desc)
		if why != "" {
			why = ": " + why
		}
		return "", 0, fmt.Errorf("kafka: OAuth token endpoint %s answered %s%s (check MV_KAFKA_SASL_OAUTH_CLIENT_ID and _CLIENT_SECRET)", redactURL(s.endpoint), resp.Status, why)
	}
	var t struct {
		AccessToken string          `json:"access_token"`
		ExpiresIn   json.RawMessage `json:"expires_in"`
	}
	if err := json.Unmarshal(body, &t); err != nil || t.AccessToken == "" {
		return "", 0, fmt.Errorf("kafka: OAuth token endpoint %s answered without an access_token", redactURL(s.endpoint))
	}
	var secs float64
	if json.Unmarshal(t.ExpiresIn, &secs) != nil {
		var str string // some servers quote it
		if json.Unmarshal(t.ExpiresIn, &str) == nil {
			_, _ = fmt.Sscan(str, &secs)
		}
	}
	lifetime := time.Duration(secs * float64(time.Second))
	if exp := jwtLifetime(t.AccessToken, time.Now()); exp > 0 && (lifetime <= 0 || exp < lifetime) {
		lifetime = exp
	}
	return t.AccessToken, lifetime, nil
}

// redactURL is raw without a password or query, which may hold secrets,
// for errors and logs.
func redactURL(raw string) string {
	u, err := url.Parse(strings.TrimSpace(raw))
	if err != nil {
		return "(an unparsable URL)"
	}
	u.RawQuery, u.Fragment = "", ""
	if u.User != nil {
		u.User = url.User(u.User.Username())
	}
	return u.String()
}

// jwtLifetime is how long a JWT has until its exp claim, 0 if it is not a
// JWT or has none.
func jwtLifetime(token string, now time.Time) time.Duration {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return 0
	}
	payload, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(parts[1], "="))
	if err != nil {
		return 0
	}
	var claims struct {
		Exp float64 `json:"exp"`
	}
	if json.Unmarshal(payload, &claims) != nil || claims.Exp <= 0 {
		return 0
	}
	return max(time.Unix(int64(claims.Exp), 0).Sub(now), 0)
}
