package cewire

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/monovertex/monovertex/internal/testutil"
	"github.com/monovertex/monovertex/runner"
)

// tlsReceiver is an https:// receiver on 127.0.0.1 whose certificate a
// CA of the test's own signed; it counts the events it took.
func tlsReceiver(t *testing.T, pki testutil.PKI) (string, *atomic.Int64) {
	t.Helper()
	var got atomic.Int64
	return testutil.StartTLSServer(t, pki, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got.Add(1)
		w.WriteHeader(http.StatusAccepted)
	})), &got
}

func post(t *testing.T, c *Client) error {
	t.Helper()
	ev := event.New()
	ev.SetID("1")
	ev.SetSource("/t")
	ev.SetType("t")
	resp, err := c.Post(context.Background(), &ev, false)
	if err != nil {
		return PostError(err)
	}
	return c.CheckStatus(resp)
}

// TestKCACertsIsTrusted: an https:// receiver whose CA is in K_CA_CERTS
// takes events, one whose CA is not is refused as untrusted (the peer is
// away, not the message at fault), and a K_CA_CERTS file rewritten with
// another CA is read again at the next connection.
func TestKCACertsIsTrusted(t *testing.T) {
	pki, other := testutil.NewPKI(t), testutil.NewPKI(t)
	url, got := tlsReceiver(t, pki)

	// The system's CAs alone do not know the test's CA.
	err := post(t, NewClient(ClientOptions{URL: url}))
	if !runner.IsUnavailable(err) {
		t.Fatalf("without K_CA_CERTS: %v, want an untrusted certificate (Unavailable)", err)
	}

	trust, err := LoadTrust(string(pki.CA))
	if err != nil {
		t.Fatal(err)
	}
	if err := post(t, NewClient(ClientOptions{URL: url, Trust: trust})); err != nil {
		t.Fatalf("K_CA_CERTS as PEM: %v", err)
	}

	// A file holding another CA: refused; rewritten with the right one:
	// taken, by the same client.
	path := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(path, other.CA, 0o600); err != nil {
		t.Fatal(err)
	}
	trust, err = LoadTrust(path)
	if err != nil {
		t.Fatal(err)
	}
	c := NewClient(ClientOptions{URL: url, Trust: trust})
	if err := post(t, c); !runner.IsUnavailable(err) || !IsUnreachable(err) {
		t.Fatalf("K_CA_CERTS file with another CA: %v, want untrusted", err)
	}
	if err := os.WriteFile(path, pki.CA, 0o600); err != nil {
		t.Fatal(err)
	}
	// The kubelet swaps a mounted file whole; make its time differ as
	// that would, whatever the file system's clock resolution.
	later := time.Now().Add(time.Minute)
	if err := os.Chtimes(path, later, later); err != nil {
		t.Fatal(err)
	}
	if err := post(t, c); err != nil {
		t.Fatalf("after the file was rewritten with the right CA: %v", err)
	}
	if n := got.Load(); n != 2 {
		t.Fatalf("receiver took %d events, want 2", n)
	}

	for _, bad := range []string{"-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----", filepath.Join(t.TempDir(), "missing.crt")} {
		if _, err := LoadTrust(bad); err == nil {
			t.Errorf("LoadTrust(%q) took it", bad)
		}
	}
	if tr, err := LoadTrust(""); tr != nil || err != nil {
		t.Errorf("LoadTrust(\"\") = %v, %v; want nil, nil", tr, err)
	}
}
