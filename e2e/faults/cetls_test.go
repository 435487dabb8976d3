package faults_test

import (
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/monovertex/monovertex/internal/testutil"
)

// trustedTLS makes a test CA the runner trusts (through SSL_CERT_FILE,
// which Go's crypto/x509 reads on Linux) and a server configuration with a
// certificate for 127.0.0.1 that it signed.
func trustedTLS(t *testing.T) (caFile string, cfg *tls.Config) {
	t.Helper()
	pki := testutil.NewPKI(t)
	caFile = filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, pki.CA, 0o600); err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair(pki.ServerCert, pki.ServerKey)
	if err != nil {
		t.Fatal(err)
	}
	return caFile, &tls.Config{Certificates: []tls.Certificate{cert}}
}

// listenAgain listens on addr, which a server just closed.
func listenAgain(t *testing.T, addr string) net.Listener {
	t.Helper()
	var ln net.Listener
	var err error
	for range 100 { // the port may take a moment to be free
		if ln, err = net.Listen("tcp", addr); err == nil {
			return ln
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("listen on %s again: %v", addr, err)
	return nil
}

// holdOnPlainHTTP checks the runner p while its https:// peer speaks plain
// HTTP: the log names the setting and what the peer answered, /readyz
// answers 503 naming it too, and for two seconds of retries (each message
// has MV_RETRY_STEPS=1 and MV_ON_FAILURE=drop) nothing is dropped, acked
// or sent to the peer (calls counts what its handler saw).
func holdOnPlainHTTP(t *testing.T, p *testutil.Process, variable, url string, calls func() int) string {
	t.Helper()
	// Go's plain HTTP server answers a handshake with 400 when it finds a
	// line end in it, and otherwise waits for one past the call's
	// timeout: the line says either, naming plain HTTP.
	prefix := variable + " " + url + ": the server "
	awayLine := func() string {
		for l := range strings.Lines(p.Stderr.String()) {
			if strings.Contains(l, prefix) && strings.Contains(l, "plain HTTP") {
				return l
			}
		}
		return ""
	}
	testutil.WaitFor(t, 30*time.Second, "a log line "+prefix+"... plain HTTP", func() bool { return awayLine() != "" })
	t.Logf("log: %s", strings.TrimSpace(awayLine()))
	testutil.WaitFor(t, 10*time.Second, "/readyz 503", func() bool { return p.Readyz() == http.StatusServiceUnavailable })
	_, body := testutil.Get(t, p.AdminURL+"/readyz")
	if !strings.Contains(string(body), prefix) || !strings.Contains(string(body), "plain HTTP") {
		t.Fatalf("/readyz says %q, want it to name %q and plain HTTP", body, prefix)
	}
	time.Sleep(2 * time.Second)
	st, err := p.Status()
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(p.Stderr.String(), prefix); n != 1 {
		t.Errorf("the log says %d times that the peer is away, want once", n)
	}
	if st.Totals.Dropped != 0 || st.Totals.TransformerDropped != 0 || st.Totals.SinkDropped != 0 || st.Totals.Acked != 0 || calls() != 0 {
		t.Fatalf("while the peer answered plain HTTP: %d dropped (%d transformer, %d sink), %d acked, %d requests seen by the peer; want all 0",
			st.Totals.Dropped, st.Totals.TransformerDropped, st.Totals.SinkDropped, st.Totals.Acked, calls())
	}
	if code := p.Readyz(); code != http.StatusServiceUnavailable {
		t.Fatalf("/readyz %d after 2s of a plain HTTP peer, want 503", code)
	}
	return fmt.Sprintf("%d read and held, 0 dropped, /readyz 503", st.Totals.Read)
}

// TestHTTPSURLToPlainHTTPTransformerHolds: MV_TRANSFORMER_URL is https://
// but the function speaks plain HTTP. The TLS handshake fails on every
// call; that is the peer misconfigured, not the message failing, so even
// with MV_RETRY_STEPS=1 and MV_ON_FAILURE=drop nothing is dropped: the
// messages are held, the log says what the peer answered and /readyz is
// 503. Once the function serves TLS with a certificate the runner trusts
// on the same address, every message is delivered. (Before the fix the
// handshake error spent the retry step and all of them were dropped.)
func TestHTTPSURLToPlainHTTPTransformerHolds(t *testing.T) {
	const n = 300
	f := newJS(t)
	f.PublishAll(n, 64)
	caFile, tlsCfg := trustedTLS(t)

	fn := &faultyFunction{calls: map[string]int{}, faults: map[string]int{}}
	fn.Server = httptest.NewUnstartedServer(http.HandlerFunc(fn.handle))
	fn.Listener.Close()
	fn.Listener = listenAgain(t, "127.0.0.1:"+strconv.Itoa(testutil.FreePort(t)))
	fn.Start()
	addr := fn.Listener.Addr().String()
	t.Cleanup(func() { fn.Close() })

	url := "https://" + addr
	env := transformerEnv(f, url)
	env["MV_RETRY_STEPS"] = "1"
	env["MV_ON_FAILURE"] = "drop"
	env["SSL_CERT_FILE"] = caFile
	// Room for a first TLS handshake under -race on a shared machine: a
	// call that times out after it got its connection is the function's
	// fault, which MV_ON_FAILURE=drop would rightly drop.
	env["MV_TRANSFORMER_TIMEOUT"] = "10s"
	p := testutil.StartRunner(t, env)
	held := holdOnPlainHTTP(t, p, "MV_TRANSFORMER_URL", url, func() int { return int(fn.total.Load()) })

	fn.Close()
	fn.Server = httptest.NewUnstartedServer(http.HandlerFunc(fn.handle))
	fn.Listener.Close()
	fn.Listener = listenAgain(t, addr)
	fn.TLS = tlsCfg
	fn.StartTLS()
	switched := time.Now()
	if !waitFor(90*time.Second, func() bool { return f.StreamMsgs(outStream) >= n && f.Idle() }) {
		st, _ := p.Status()
		t.Fatalf("90s after the function served TLS: %d in %s; runner totals %+v, last error %+v; function %s", f.StreamMsgs(outStream), outStream, st.Totals, st.LastError, fn.stats())
	}
	recovered := time.Since(switched)
	tl := f.Count(n, true)
	tl.MustBeComplete(t)
	if len(tl.Out) != n {
		t.Fatalf("%d of %d messages in the output stream after the function served TLS", len(tl.Out), n)
	}
	testutil.WaitFor(t, 10*time.Second, "/readyz 200", func() bool { return p.Readyz() == http.StatusOK })
	if !strings.Contains(p.Stderr.String(), "MV_TRANSFORMER_URL "+url+" answers again") {
		t.Errorf("no log line saying the function answers again")
	}
	stopClean(t, p)
	report(t, result{Scenario: "CE transformer: https:// URL to a plain-HTTP function (MV_RETRY_STEPS=1, drop), then TLS served",
		Messages: n, Lost: tl.Lost, Duplicated: fmt.Sprint(tl.DuplicatePublish), Recovery: round(recovered),
		Notes: held + "; " + fn.stats()})
}

// TestHTTPSURLToPlainHTTPSinkHolds is the same for K_SINK: the receiver
// speaks plain HTTP to an https:// URL, then serves TLS on the same port.
func TestHTTPSURLToPlainHTTPSinkHolds(t *testing.T) {
	const n = 300
	f, r, env := newCESink(t)
	f.PublishAll(n, 64)
	caFile, tlsCfg := trustedTLS(t)
	url := "https://" + r.addr
	env["K_SINK"] = url
	env["MV_RETRY_STEPS"] = "1"
	env["MV_ON_FAILURE"] = "drop"
	env["SSL_CERT_FILE"] = caFile
	p := testutil.StartRunner(t, env)
	held := holdOnPlainHTTP(t, p, "K_SINK", url, func() int {
		accepted, failed := r.snapshot()
		return len(accepted) + len(failed)
	})

	r.setMode("down")
	r.mu.Lock()
	r.tls = tlsCfg
	r.mu.Unlock()
	r.setMode("ok")
	switched := time.Now()
	f.waitReceived(n, 120*time.Second, r)
	recovered := time.Since(switched)
	c := mustHaveAll(t, n, r)
	testutil.WaitFor(t, 10*time.Second, "/readyz 200", func() bool { return p.Readyz() == http.StatusOK })
	if !strings.Contains(p.Stderr.String(), "K_SINK "+url+" answers again") {
		t.Errorf("no log line saying the sink answers again")
	}
	stopClean(t, p)
	report(t, result{Scenario: "CE sink: https:// K_SINK to a plain-HTTP receiver (MV_RETRY_STEPS=1, drop), then TLS served",
		Messages: n, Lost: c.lost, Duplicated: fmt.Sprint(c.dups), Recovery: round(recovered), Notes: held})
}
