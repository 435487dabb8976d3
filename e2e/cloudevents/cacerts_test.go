package cloudevents_test

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/monovertex/monovertex/internal/testutil"
)

// TestRunnerTrustsKCACerts runs the runner binary against an https://
// sink and fallback sink whose certificate a CA of the test's own signed
// (a Broker's status.address under transport-encryption): with that CA in
// K_CA_CERTS, as PEM or as the path of a file, every event reaches them;
// the sink refuses the odd ones, which the fallback sink takes.
func TestRunnerTrustsKCACerts(t *testing.T) {
	pki := testutil.NewPKI(t)
	caFile := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(caFile, pki.CA, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ name, value string }{{"PEM", string(pki.CA)}, {"file", caFile}} {
		t.Run(c.name, func(t *testing.T) {
			var mu sync.Mutex
			got := map[string]string{}
			url := testutil.StartTLSServer(t, pki, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				id := r.Header.Get("Ce-Id")
				var i int
				fmt.Sscanf(id, "ev-%d", &i)
				if r.URL.Path == "/broker" && i%2 == 1 {
					w.WriteHeader(http.StatusBadRequest)
					return
				}
				mu.Lock()
				got[id] = r.URL.Path
				mu.Unlock()
				w.WriteHeader(http.StatusAccepted)
			}))
			p := startHTTPRunner(t, "tls", map[string]string{
				"K_SINK":               url + "/broker",
				"MV_FALLBACK_SINK":     "cloudevents",
				"MV_FALLBACK_SINK_URL": url + "/dlq",
				"MV_ON_FAILURE":        "fallback",
				"K_CA_CERTS":           c.value,
				// Room for the first TLS handshakes under -race.
				"MV_CE_SINK_TIMEOUT": "10s",
			})
			waitOK(t, sendEvents(p, "tls", 0, 10))
			mu.Lock()
			defer mu.Unlock()
			for i := 0; i < 10; i++ {
				want := "/broker"
				if i%2 == 1 {
					want = "/dlq"
				}
				if id := fmt.Sprintf("ev-%d", i); got[id] != want {
					t.Errorf("%s taken at %q, want %q", id, got[id], want)
				}
			}
			at := map[string]int{}
			for _, path := range got {
				at[path]++
			}
			t.Logf("K_CA_CERTS as %s: %d events over https, %d at the sink and %d at the fallback sink", c.name, len(got), at["/broker"], at["/dlq"])
		})
	}
}
