package kafkaconn

import (
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// tokenServer is an OAuth 2 token endpoint on loopback that grants
// client_credentials to id/secret only, answering body(n) for its n-th
// grant; it counts the grants.
func tokenServer(t *testing.T, id, secret string, body func(n int64) string) (*httptest.Server, *atomic.Int64) {
	var grants atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		u, p, ok := r.BasicAuth()
		switch {
		case r.Method != http.MethodPost || r.Header.Get("Content-Type") != "application/x-www-form-urlencoded" || string(b) != "grant_type=client_credentials":
			http.Error(w, `{"error":"invalid_request"}`, http.StatusBadRequest)
		case !ok || u != id || p != secret:
			w.WriteHeader(http.StatusUnauthorized)
			fmt.Fprint(w, `{"error":"invalid_client","error_description":"bad credentials"}`)
		default:
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, body(grants.Add(1)))
		}
	}))
	t.Cleanup(srv.Close)
	return srv, &grants
}

func TestTokenSourceAsLibrdkafkaAsksForTokens(t *testing.T) {
	srv, grants := tokenServer(t, "mv-client", "s3cret", func(n int64) string {
		return fmt.Sprintf(`{"access_token":"tok-%d","token_type":"Bearer","expires_in":3600}`, n)
	})
	ts := &tokenSource{endpoint: srv.URL, id: "mv-client", secret: "s3cret", client: srv.Client()}
	ctx := context.Background()
	for i := 0; i < 3; i++ {
		a, err := ts.auth(ctx)
		if err != nil || a.Token != "tok-1" {
			t.Fatalf("auth %d: %q, %v; want tok-1 while it is fresh", i, a.Token, err)
		}
	}
	if grants.Load() != 1 {
		t.Fatalf("%d grants for three authentications within the token's lifetime, want 1", grants.Load())
	}
	if d := time.Until(ts.renewAt); d < 47*time.Minute || d > 48*time.Minute {
		t.Fatalf("renews in %v, want at 80%% of 3600s", d)
	}
	ts.renewAt = time.Now() // 80 % of its lifetime passed
	if a, err := ts.auth(ctx); err != nil || a.Token != "tok-2" || grants.Load() != 2 {
		t.Fatalf("after 80%% of the lifetime: %q, %v, %d grants; want tok-2 from a second grant", a.Token, err, grants.Load())
	}

	bad := &tokenSource{endpoint: srv.URL, id: "mv-client", secret: "wrong", client: srv.Client()}
	_, err := bad.auth(ctx)
	if err == nil || !strings.Contains(err.Error(), "invalid_client") || strings.Contains(err.Error(), "wrong") {
		t.Fatalf("wrong secret: %v, want the endpoint's invalid_client and no secret", err)
	}
}

func TestTokenLifetimeFromTheJWTOrNone(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	jwt := func(payload string) string {
		return "eyJhbGciOiJub25lIn0." + base64.RawURLEncoding.EncodeToString([]byte(payload)) + ".sig"
	}
	for _, c := range []struct {
		token string
		want  time.Duration
	}{
		{jwt(`{"sub":"mv","exp":1700000600}`), 10 * time.Minute},
		{jwt(`{"sub":"mv"}`), 0},
		{jwt(`{"exp":1699999000}`), 0}, // expired: ask again
		{"opaque-token", 0},
		{"a.b!.c", 0},
	} {
		if got := jwtLifetime(c.token, now); got != c.want {
			t.Errorf("jwtLifetime(%q) = %v, want %v", c.token, got, c.want)
		}
	}
	// Without expires_in the JWT's exp counts; without either the token
	// is asked for at every authentication.
	srv, grants := tokenServer(t, "id", "pw", func(n int64) string {
		if n == 1 {
			return fmt.Sprintf(`{"access_token":%q}`, jwt(fmt.Sprintf(`{"exp":%d}`, time.Now().Add(time.Hour).Unix())))
		}
		return `{"access_token":"opaque","expires_in":"0"}`
	})
	ts := &tokenSource{endpoint: srv.URL, id: "id", secret: "pw", client: srv.Client()}
	for i := 0; i < 2; i++ {
		if _, err := ts.auth(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if grants.Load() != 1 {
		t.Fatalf("%d grants with a JWT valid for an hour, want 1", grants.Load())
	}
	ts.renewAt = time.Now()
	for i := 0; i < 2; i++ {
		if _, err := ts.auth(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if grants.Load() != 3 {
		t.Fatalf("%d grants, want 3: a token without a lifetime is asked for every time", grants.Load())
	}
}

func TestValidateOAuth(t *testing.T) {
	good := Auth{SASLMechanism: "OAUTHBEARER", OAuthClientID: "id\n", OAuthSecret: "pw\n", OAuthEndpoint: "https://idp.example.com/token"}
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		change func(*Auth)
		want   string
	}{
		{"no client id", func(a *Auth) { a.OAuthClientID = " " }, "MV_KAFKA_SASL_OAUTH_CLIENT_ID"},
		{"no secret", func(a *Auth) { a.OAuthSecret = "" }, "MV_KAFKA_SASL_OAUTH_CLIENT_SECRET"},
		{"no endpoint", func(a *Auth) { a.OAuthEndpoint = "" }, "MV_KAFKA_SASL_OAUTH_TOKEN_ENDPOINT"},
		{"not http", func(a *Auth) { a.OAuthEndpoint = "ftp://idp/token" }, "MV_KAFKA_SASL_OAUTH_TOKEN_ENDPOINT"},
		{"no host", func(a *Auth) { a.OAuthEndpoint = "https:///token" }, "MV_KAFKA_SASL_OAUTH_TOKEN_ENDPOINT"},
		{"GSSAPI", func(a *Auth) { a.SASLMechanism = "GSSAPI" }, "MV_KAFKA_SASL_MECHANISM"},
		{"OAuth settings without the mechanism", func(a *Auth) { a.SASLMechanism = "" }, "MV_KAFKA_SASL_MECHANISM"},
		{"OAuth settings under PLAIN", func(a *Auth) { a.SASLMechanism, a.SASL.User = "PLAIN", "u" }, "MV_KAFKA_SASL_MECHANISM"},
		{"a SASL user under OAUTHBEARER", func(a *Auth) { a.SASL.User = "u" }, "MV_KAFKA_SASL_USER"},
		{"an endpoint with a secret in it", func(a *Auth) { a.OAuthEndpoint = "ftp://u:pw@idp/token?pw" }, "MV_KAFKA_SASL_OAUTH_TOKEN_ENDPOINT"},
	} {
		a := good
		c.change(&a)
		err := a.Validate()
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "pw") {
			t.Errorf("%s: %v, want an error naming %s (and no secret)", c.name, err, c.want)
		}
	}
}

// TestConnectionsShareOneGrant: connections that authenticate while a
// grant is under way wait for it and share its token; one whose context
// ends stops waiting at once.
func TestConnectionsShareOneGrant(t *testing.T) {
	release := make(chan struct{})
	var grants atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		grants.Add(1)
		<-release
		fmt.Fprint(w, `{"access_token":"shared","expires_in":60}`)
	}))
	t.Cleanup(srv.Close)
	ts := &tokenSource{endpoint: srv.URL + "?secret=q", id: "id", secret: "pw", client: srv.Client()}
	const n = 5
	got := make(chan string, n)
	for i := 0; i < n; i++ {
		go func() {
			a, err := ts.auth(context.Background())
			if err != nil {
				got <- "error: " + err.Error()
				return
			}
			got <- a.Token
		}()
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := ts.auth(ctx); err == nil || !strings.Contains(err.Error(), "canceled") || strings.Contains(err.Error(), "secret=q") {
		t.Fatalf("a cancelled caller: %v, want its context's error at once and no query", err)
	}
	close(release)
	for i := 0; i < n; i++ {
		select {
		case tok := <-got:
			if tok != "shared" {
				t.Fatalf("caller %d got %q", i, tok)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("a caller still waits for the grant")
		}
	}
	if grants.Load() != 1 {
		t.Fatalf("%d grants for %d waiting connections, want 1", grants.Load(), n)
	}
}

// TestTheShorterLifetimeCounts: expires_in longer than the JWT's exp does
// not keep an expired token.
func TestTheShorterLifetimeCounts(t *testing.T) {
	exp := time.Now().Add(10 * time.Minute).Unix()
	tok := "eyJhbGciOiJub25lIn0." + base64.RawURLEncoding.EncodeToString(fmt.Appendf(nil, `{"exp":%d}`, exp)) + ".sig"
	srv, _ := tokenServer(t, "id", "pw", func(int64) string { return fmt.Sprintf(`{"access_token":%q,"expires_in":86400}`, tok) })
	ts := &tokenSource{endpoint: srv.URL, id: "id", secret: "pw", client: srv.Client()}
	if _, err := ts.auth(context.Background()); err != nil {
		t.Fatal(err)
	}
	if d := time.Until(ts.renewAt); d > 8*time.Minute+time.Second || d < 7*time.Minute {
		t.Fatalf("renews in %v, want at 80%% of the JWT's 10 minutes, not of expires_in's day", d)
	}
	if r := redactURL("https://u:p4ss@idp/token?client_secret=x#f"); r != "https://u@idp/token" {
		t.Fatalf("redactURL: %q", r)
	}
}

// TestTokenAnswerWithoutAToken: a 200 without access_token is an error
// naming the endpoint (without its query), not an empty token.
func TestTokenAnswerWithoutAToken(t *testing.T) {
	srv, _ := tokenServer(t, "id", "pw", func(int64) string { return `{"token_type":"Bearer"}` })
	ts := &tokenSource{endpoint: srv.URL + "?k=secret", id: "id", secret: "pw", client: srv.Client()}
	_, err := ts.auth(context.Background())
	if err == nil || !strings.Contains(err.Error(), "without an access_token") || strings.Contains(err.Error(), "secret") {
		t.Fatalf("error %v, want one saying the answer held no access_token, without the query", err)
	}
}
