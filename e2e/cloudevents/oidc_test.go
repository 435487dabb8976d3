package cloudevents_test

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/monovertex/monovertex/internal/testutil"
)

// TestRunnerOIDCTokenFileIsRenewed runs the runner binary with a token
// file (as a projected service account token volume or a SinkBinding's
// /oidc/token) against a receiver that, like a Broker with
// authentication-oidc, takes an event only with the token it expects and
// answers 401 otherwise. The receiver moves to a new token before the
// file does (a token past its expiry): the events sent meanwhile are
// refused, held (not dropped, /readyz 503 naming the 401) and delivered
// once the file is rewritten; every event is taken exactly once.
func TestRunnerOIDCTokenFileIsRenewed(t *testing.T) {
	var mu sync.Mutex
	want, taken, refused := "token-1", map[string]map[string]int{}, 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		tok, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if tok != want {
			refused++
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		if taken[tok] == nil {
			taken[tok] = map[string]int{}
		}
		taken[tok][r.Header.Get("Ce-Id")]++
		w.WriteHeader(http.StatusAccepted)
	}))
	t.Cleanup(srv.Close)
	path := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(path, []byte("token-1"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startHTTPRunner(t, "oidc", map[string]string{
		"K_SINK":             srv.URL,
		"MV_OIDC_TOKEN_PATH": path,
		"MV_RETRY_STEPS":     "1",
		"MV_ON_FAILURE":      "drop",
	})
	waitOK(t, sendEvents(p, "oidc", 0, 20))
	mu.Lock()
	want = "token-2"
	mu.Unlock()
	held := sendEvents(p, "oidc", 20, 40)
	testutil.WaitFor(t, 60*time.Second, "/readyz to answer 503 naming the 401", func() bool {
		code, body := testutil.Get(t, p.AdminURL+"/readyz")
		return code == http.StatusServiceUnavailable && strings.Contains(string(body), "401")
	})
	later := time.Now().Add(time.Minute)
	if err := os.WriteFile(path, []byte("token-2"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(path, later, later); err != nil {
		t.Fatal(err)
	}
	waitOK(t, held)
	mu.Lock()
	defer mu.Unlock()
	if len(taken["token-1"]) != 20 || len(taken["token-2"]) != 20 {
		t.Fatalf("taken with token-1: %d, token-2: %d; want 20 and 20", len(taken["token-1"]), len(taken["token-2"]))
	}
	for tok, ids := range taken {
		for id, n := range ids {
			if n != 1 {
				t.Errorf("%s taken %d times with %s", id, n, tok)
			}
		}
	}
	if refused == 0 {
		t.Fatal("no delivery was refused while the file held the old token")
	}
	t.Logf("40 events taken once each (20 with token-1, 20 with token-2 after the file was renewed); %d deliveries refused with 401 and held meanwhile, none dropped (MV_RETRY_STEPS=1, MV_ON_FAILURE=drop)", refused)
}
