package kafka

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/oauth"

	"github.com/monovertex/monovertex/internal/kafkatest"
	"github.com/monovertex/monovertex/runner"
)

// TestReadsWithOAuthAsNumaflowsOIDC: brokers that want SASL OAUTHBEARER
// with a token their identity provider issued, and that provider's token
// endpoint on loopback granting client_credentials to one client, as a
// Numaflow source with sasl.oauth reaches them (librdkafka's OIDC method).
// The client ID and secret carry a Secret's trailing line break. Every
// record is read and committed; a wrong secret is refused by the endpoint
// and a token the brokers do not know by the brokers, each with its reason.
func TestReadsWithOAuthAsNumaflowsOIDC(t *testing.T) {
	const id, secret, token = "mv-runner", "0auth-s3cret", "idp-token-1"
	var grants atomic.Int64
	idp := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		u, p, ok := r.BasicAuth()
		if !ok || u != id || p != secret || string(body) != "grant_type=client_credentials" {
			w.WriteHeader(http.StatusUnauthorized)
			fmt.Fprint(w, `{"error":"invalid_client"}`)
			return
		}
		grants.Add(1)
		tok := token
		if r.URL.Path == "/other" {
			tok = "a-token-the-brokers-never-saw"
		}
		fmt.Fprintf(w, `{"access_token":%q,"token_type":"Bearer","expires_in":3600}`, tok)
	}))
	t.Cleanup(idp.Close)

	c := kafkatest.StartSecure(t, 1, map[string]int{"oa": 2}, kafkatest.Security{
		OAuthTokens: []string{token},
		ClientOpts:  []kgo.Opt{kgo.SASL(oauth.Auth{Token: token}.AsMechanism())},
	})
	ctx := context.Background()
	// The brokers refuse a client without OAUTHBEARER, so the reads below
	// prove the source authenticated.
	plain, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(c.Brokers(), ",")...))
	if err != nil {
		t.Fatal(err)
	}
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	if err := plain.Ping(pctx); err == nil {
		t.Fatal("the brokers answered a client without OAUTHBEARER")
	}
	cancel()
	plain.Close()
	produceNumbers(t, c.Client(), "oa", 50)

	cfg := testConfig(c.Brokers(), "oa")
	cfg.SASLMechanism, cfg.OAuthClientID, cfg.OAuthSecret, cfg.OAuthEndpoint = "OAUTHBEARER", id+"\n", secret+"\n", idp.URL+"/token"
	if err := cfg.Validate(runner.RoleSource); err != nil {
		t.Fatal(err)
	}
	s := newSource(t, cfg)
	got := readAll(t, s, 50)
	if err := s.Ack(ctx, got); err != nil {
		t.Fatal(err)
	}
	testutilWait(t, 20*time.Second, func() bool {
		cm := kafkatest.Committed(t, c.Client(), cfg.Group, "oa")
		return cm[0]+cm[1] == 50
	})
	if grants.Load() < 1 {
		t.Fatal("the source never asked the token endpoint")
	}
	t.Logf("read and committed %d records; %d token grants", len(got), grants.Load())

	for _, tc := range []struct {
		name, secret, path, want string
	}{
		{"a wrong secret", "wrong", "/token", "invalid_client"},
		{"a token the brokers do not know", secret, "/other", "SASL_AUTHENTICATION_FAILED"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bad := cfg
			bad.Group, bad.OAuthSecret, bad.OAuthEndpoint = "oa-bad", tc.secret, idp.URL+tc.path
			ctx, cancel := context.WithTimeout(ctx, 40*time.Second)
			defer cancel()
			s, err := New(ctx, bad, "test", nil)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close(ctx)
			if err = s.Connect(ctx); err == nil {
				t.Fatal("joined the group")
			}
			t.Logf("refused: %v", err)
			if !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "wrong") && tc.secret == "wrong" {
				t.Fatalf("error %v, want one saying %s and not showing the secret", err, tc.want)
			}
		})
	}
}
