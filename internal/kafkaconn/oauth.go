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
// lifetime has passed (librdkafka refreshes at 80 % too), taken from the
// answer's expires_in or else the JWT's exp; one without either is asked
// for again at every authentication.
type tokenSource struct {
	endpoint, id, secret string
	client               *http.Client

	mu      sync.Mutex
	token   string
	renewAt time.Time
}

// auth is franz-go's OAUTHBEARER callback, called for every connection and
// reauthentication.
func (s *tokenSource) auth(ctx context.Context) (oauth.Auth, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.token != "" && time.Now().Before(s.renewAt) {
		return oauth.Auth{Token: s.token}, nil
	}
	tok, lifetime, err := s.fetch(ctx)
	if err != nil {
		return oauth.Auth{}, err
	}
	s.token, s.renewAt = tok, time.Now().Add(lifetime*8/10)
	return oauth.Auth{Token: tok}, nil
}

// fetch asks the endpoint for a token and returns it with its lifetime (0
// when the answer says none).
func (s *tokenSource) fetch(ctx context.Context) (string, time.Duration, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSpace(s.endpoint), strings.NewReader("grant_type=client_credentials"))
	if err != nil {
		return "", 0, fmt.Errorf("kafka: OAuth token request to %s: %w", s.endpoint, err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Accept", "application/json")
	req.Header.Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(s.id+":"+s.secret)))
	resp, err := s.client.Do(req)
	if err != nil {
		return "", 0, fmt.Errorf("kafka: OAuth token request to %s (check MV_KAFKA_SASL_OAUTH_TOKEN_ENDPOINT): %w", s.endpoint, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return "", 0, fmt.Errorf("kafka: OAuth token answer from %s: %w", s.endpoint, err)
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
		return "", 0, fmt.Errorf("kafka: OAuth token endpoint %s answered %s%s (check MV_KAFKA_SASL_OAUTH_CLIENT_ID and _CLIENT_SECRET)", s.endpoint, resp.Status, why)
	}
	var t struct {
		AccessToken string          `json:"access_token"`
		ExpiresIn   json.RawMessage `json:"expires_in"`
	}
	if err := json.Unmarshal(body, &t); err != nil || t.AccessToken == "" {
		return "", 0, fmt.Errorf("kafka: OAuth token endpoint %s answered without an access_token", s.endpoint)
	}
	var secs float64
	if json.Unmarshal(t.ExpiresIn, &secs) != nil {
		var str string // some servers quote it
		if json.Unmarshal(t.ExpiresIn, &str) == nil {
			_, _ = fmt.Sscan(str, &secs)
		}
	}
	lifetime := time.Duration(secs * float64(time.Second))
	if lifetime <= 0 {
		lifetime = jwtLifetime(t.AccessToken, time.Now())
	}
	return t.AccessToken, lifetime, nil
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
