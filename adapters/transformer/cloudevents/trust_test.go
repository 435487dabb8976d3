package cloudevents

import (
	"context"
	"net/http"
	"testing"

	"github.com/monovertex/monovertex/internal/testutil"
	"github.com/monovertex/monovertex/runner"
)

// TestKCACertsForTheFunction: a CloudEvents function served over https
// with a certificate of a CA only K_CA_CERTS names is called; without it
// the call fails as an untrusted peer.
func TestKCACertsForTheFunction(t *testing.T) {
	pki := testutil.NewPKI(t)
	url := testutil.StartTLSServer(t, pki, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// An answer with no event drops the message: a success.
		w.WriteHeader(http.StatusAccepted)
	}))
	for _, trusted := range []bool{false, true} {
		tr := newTransformer(t, url, func(c *Config) {
			if trusted {
				c.CACerts = string(pki.CA)
			}
		})
		res, err := tr.Transform(context.Background(), []*runner.Message{{ID: "m", Value: []byte("x")}})
		if err != nil {
			t.Fatal(err)
		}
		if trusted && (res[0].Err != nil || len(res[0].Outputs) != 0) {
			t.Errorf("with K_CA_CERTS: %+v, want a call answered with no event", res[0])
		}
		if !trusted && !runner.IsUnavailable(res[0].Err) {
			t.Errorf("without K_CA_CERTS: %+v, want an untrusted certificate (Unavailable)", res[0])
		}
		_ = tr.Close(context.Background())
	}
}
