package cewire

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/monovertex/monovertex/internal/testutil"
	"github.com/monovertex/monovertex/runner"
)

// bearerReceiver takes an event only with Authorization: Bearer <want()>;
// it counts what it took by token, and answers 401 otherwise.
type bearerReceiver struct {
	mu    sync.Mutex
	want  string
	taken map[string]int
}

func (b *bearerReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b.mu.Lock()
	defer b.mu.Unlock()
	tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || tok != b.want {
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	b.taken[tok]++
	w.WriteHeader(http.StatusAccepted)
}

func (b *bearerReceiver) set(tok string) { b.mu.Lock(); b.want = tok; b.mu.Unlock() }

// TestFileTokenIsSentAndRenewed: the token of a projected token file goes
// with every request; when the kubelet writes a new one, the next request
// carries it; a 401 meanwhile holds the message (Unavailable, /readyz
// naming the refusal) instead of failing it.
func TestFileTokenIsSentAndRenewed(t *testing.T) {
	defer func(d time.Duration) { tokenRecheck = d }(tokenRecheck)
	tokenRecheck = 0
	rcv := &bearerReceiver{want: "token-1", taken: map[string]int{}}
	srv := httptest.NewServer(rcv)
	defer srv.Close()
	path := filepath.Join(t.TempDir(), "token")
	write := func(tok string, at time.Time) {
		if err := os.WriteFile(path, []byte(tok+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(path, at, at); err != nil {
			t.Fatal(err)
		}
	}
	write("token-1", time.Now())
	src, err := NewFileToken(path)
	if err != nil {
		t.Fatal(err)
	}
	c := NewClient(ClientOptions{URL: srv.URL, Token: src, Variable: "K_SINK"})
	for i := 0; i < 3; i++ {
		if err := post(t, c); err != nil {
			t.Fatalf("with token-1: %v", err)
		}
	}
	// The receiver moves on first (a token past its expiry): refused,
	// held, and said so.
	rcv.set("token-2")
	err = post(t, c)
	if !runner.IsUnavailable(err) || runner.IsPermanent(err) {
		t.Fatalf("refused token: %v, want Unavailable", err)
	}
	if r := c.Ready(context.Background()); r == nil || !strings.Contains(r.Error(), "401") || !strings.Contains(r.Error(), "K_AUDIENCE") {
		t.Fatalf("Ready while refused: %v, want the 401 and what to check", r)
	}
	write("token-2", time.Now().Add(time.Minute))
	for i := 0; i < 2; i++ {
		if err := post(t, c); err != nil {
			t.Fatalf("after the file was renewed: %v", err)
		}
	}
	if r := c.Ready(context.Background()); r != nil {
		t.Fatalf("Ready after the renewed token was taken: %v", r)
	}
	if rcv.taken["token-1"] != 3 || rcv.taken["token-2"] != 2 {
		t.Fatalf("taken %v, want 3 with token-1 and 2 with token-2", rcv.taken)
	}
	if _, err := NewFileToken(filepath.Join(t.TempDir(), "none")); err == nil {
		t.Fatal("a missing token file was taken")
	}
}

// TestRequestedTokenIsRenewedBeforeExpiry: with K_OIDC_SERVICE_ACCOUNT,
// tokens come from the TokenRequest API of the pod's own API server (here
// a fake one over TLS), asked for the audience and an hour, authenticated
// with the pod's token; one is kept until five minutes before it expires.
func TestRequestedTokenIsRenewedBeforeExpiry(t *testing.T) {
	pki := testutil.NewPKI(t)
	var calls atomic.Int64
	issued := time.Date(2026, 12, 7, 4, 0, 0, 0, time.UTC)
	api := testutil.StartTLSServer(t, pki, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var in struct {
			Kind string `json:"kind"`
			Spec struct {
				Audiences         []string `json:"audiences"`
				ExpirationSeconds int64    `json:"expirationSeconds"`
			} `json:"spec"`
		}
		_ = json.NewDecoder(r.Body).Decode(&in)
		if r.Method != http.MethodPost || r.URL.Path != "/api/v1/namespaces/shop/serviceaccounts/orders-oidc/token" ||
			r.Header.Get("Authorization") != "Bearer pod-token" || in.Kind != "TokenRequest" ||
			len(in.Spec.Audiences) != 1 || in.Spec.Audiences[0] != "broker:shop:default" || in.Spec.ExpirationSeconds != 3600 {
			http.Error(w, fmt.Sprintf("unexpected %s %s %q %+v", r.Method, r.URL.Path, r.Header.Get("Authorization"), in), http.StatusBadRequest)
			return
		}
		n := calls.Add(1)
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"status":{"token":"jwt-%d","expirationTimestamp":%q}}`, n, issued.Add(time.Duration(n)*time.Hour).Format(time.RFC3339))
	}))
	podToken := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(podToken, []byte("pod-token"), 0o600); err != nil {
		t.Fatal(err)
	}
	src, err := NewRequestedToken(InCluster{APIServer: api, CA: pki.CA, TokenFile: podToken, Namespace: "shop"}, "orders-oidc", "broker:shop:default")
	if err != nil {
		t.Fatal(err)
	}
	now := issued
	src.(*requestedToken).now = func() time.Time { return now }
	for _, step := range []struct {
		at    time.Duration // since issued
		want  string
		calls int64
	}{
		{0, "jwt-1", 1},
		{30 * time.Minute, "jwt-1", 1},
		{54 * time.Minute, "jwt-1", 1},
		{56 * time.Minute, "jwt-2", 2}, // within five minutes of jwt-1's expiry
		{90 * time.Minute, "jwt-2", 2},
	} {
		now = issued.Add(step.at)
		tok, err := src.Token(context.Background())
		if err != nil || tok != step.want || calls.Load() != step.calls {
			t.Fatalf("at +%v: %q %v after %d calls, want %q after %d", step.at, tok, err, calls.Load(), step.want, step.calls)
		}
	}
}

// TestForbiddenHoldsTheMessage: a 403 (no EventPolicy allows the runner)
// is no fault of the message: held, and /readyz says why.
func TestForbiddenHoldsTheMessage(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusForbidden) }))
	defer srv.Close()
	c := NewClient(ClientOptions{URL: srv.URL, Variable: "K_SINK"})
	if err := post(t, c); !runner.IsUnavailable(err) || runner.IsPermanent(err) {
		t.Fatalf("403: %v, want Unavailable", err)
	}
	if r := c.Ready(context.Background()); r == nil || !strings.Contains(r.Error(), "EventPolicy") {
		t.Fatalf("Ready: %v, want the 403 explained", r)
	}
}
