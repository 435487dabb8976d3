package cloudevents

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/monovertex/monovertex/internal/testutil"
	"github.com/monovertex/monovertex/runner"
)

// TestKCACertsForEveryRole: the sink, the fallback sink and the onSuccess
// sink deliver to an https:// receiver whose CA only K_CA_CERTS names (a
// Broker's status.address with transport-encryption), and none does
// without it.
func TestKCACertsForEveryRole(t *testing.T) {
	pki := testutil.NewPKI(t)
	var got atomic.Int64
	url := testutil.StartTLSServer(t, pki, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got.Add(1)
		w.WriteHeader(http.StatusAccepted)
	}))
	for _, role := range []runner.Role{runner.RoleSink, runner.RoleFallbackSink, runner.RoleOnSuccessSink} {
		for _, trusted := range []bool{false, true} {
			s := newSink(t, role, url, func(c *Config) {
				if role == runner.RoleOnSuccessSink {
					c.OnSuccess.URL = url
				}
				if trusted {
					c.CACerts = string(pki.CA)
				}
			})
			res, err := s.Write(context.Background(), []*runner.Message{{ID: "m", Value: []byte("x")}})
			if err != nil {
				t.Fatal(err)
			}
			switch ok := res[0].Status == runner.WriteOK; {
			case trusted && !ok:
				t.Errorf("%v with K_CA_CERTS: %v", role, res[0].Err)
			case !trusted && (ok || !runner.IsUnavailable(res[0].Err)):
				t.Errorf("%v without K_CA_CERTS: %+v, want an untrusted certificate (Unavailable)", role, res[0])
			}
			_ = s.Close(context.Background())
		}
	}
	if n := got.Load(); n != 3 {
		t.Fatalf("receiver took %d events, want 3 (one per role, with K_CA_CERTS)", n)
	}
}
