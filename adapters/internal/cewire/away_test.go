package cewire

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/monovertex/monovertex/runner"
)

// plainAnswerer answers every connection at once with a plain HTTP 400,
// as a plain HTTP server that finds no request line in a TLS handshake
// does, and counts the connections.
func plainAnswerer(t *testing.T) (addr string, conns *atomic.Int32) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	conns = &atomic.Int32{}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			c.Write([]byte("HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"))
			c.Close()
		}
	}()
	return ln.Addr().String(), conns
}

// TestTLSToPlainHTTPIsUnreachable: a call to an https:// URL whose server
// answers plain HTTP never reached a peer that takes events, so it is
// runner.Unavailable (not a failure of the message), Ready says what the
// peer answered, and the log says it once for many calls.
func TestTLSToPlainHTTPIsUnreachable(t *testing.T) {
	addr, conns := plainAnswerer(t)
	core, logs := observer.New(zapcore.InfoLevel)
	url := "https://" + addr
	c := NewClient(ClientOptions{URL: url, Mode: ModeBinary, Timeout: 5 * time.Second, Variable: "MV_TRANSFORMER_URL", Log: zap.New(core).Sugar()})
	if err := c.Ready(context.Background()); err != nil {
		t.Fatalf("ready before any call: %v", err)
	}
	const calls = 3
	for i := range calls {
		_, err := c.Post(context.Background(), smallEvent(i, 10), true)
		if !IsUnreachable(err) || !runner.IsUnavailable(PostError(err)) {
			t.Fatalf("call %d: %v; want an unreachable peer, runner.Unavailable", i, err)
		}
	}
	want := "MV_TRANSFORMER_URL " + url + ": the server answered plain HTTP to a TLS handshake"
	if err := c.Ready(context.Background()); err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Fatalf("Ready: %v; want %q...", err, want)
	}
	if n := logs.FilterMessageSnippet(want).Len(); n != 1 || logs.Len() != 1 {
		t.Fatalf("%d log lines, %d of them %q; want that one once for %d calls", logs.Len(), n, want, calls)
	}
	if conns.Load() != calls {
		t.Fatalf("%d connections for %d calls", conns.Load(), calls)
	}
}

// TestUntrustedCertificateIsUnreachable: a TLS server whose certificate
// the runner does not trust is a misconfigured peer too.
func TestUntrustedCertificateIsUnreachable(t *testing.T) {
	var seen atomic.Int32
	srv := httptest.NewTLSServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { seen.Add(1) }))
	t.Cleanup(srv.Close)
	c := NewClient(ClientOptions{URL: srv.URL, Mode: ModeBinary, Timeout: 5 * time.Second, Variable: "K_SINK"})
	_, err := c.Post(context.Background(), smallEvent(0, 10), false)
	if !IsUnreachable(err) || seen.Load() != 0 {
		t.Fatalf("%v (%d requests seen); want an unreachable peer and none", err, seen.Load())
	}
	if err := c.Ready(context.Background()); err == nil || !strings.Contains(err.Error(), "K_SINK "+srv.URL+": its TLS certificate is not trusted") {
		t.Fatalf("Ready: %v", err)
	}
}

// TestReadyAgainOnAnswer: a peer that refused connections and then
// answers makes the client ready again, and the log says so.
func TestReadyAgainOnAnswer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	core, logs := observer.New(zapcore.InfoLevel)
	url := "http://" + addr
	c := NewClient(ClientOptions{URL: url, Mode: ModeBinary, Timeout: 5 * time.Second, Variable: "K_SINK", Log: zap.New(core).Sugar()})
	if _, err := c.Post(context.Background(), smallEvent(0, 10), false); !IsUnreachable(err) {
		t.Fatalf("post to a closed port: %v", err)
	}
	if err := c.Ready(context.Background()); err == nil || !strings.Contains(err.Error(), "K_SINK "+url+": cannot connect") {
		t.Fatalf("Ready with the peer away: %v", err)
	}
	var ln2 net.Listener
	for range 100 {
		if ln2, err = net.Listen("tcp", addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	srv := &httptest.Server{Listener: ln2, Config: &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusAccepted) })}}
	srv.Start()
	t.Cleanup(srv.Close)
	if _, err := c.Post(context.Background(), smallEvent(1, 10), false); err != nil {
		t.Fatal(err)
	}
	if err := c.Ready(context.Background()); err != nil {
		t.Fatalf("Ready after an answer: %v", err)
	}
	if logs.FilterMessage("K_SINK "+url+" answers again").Len() != 1 {
		t.Fatalf("log: %v; want one line saying the peer answers again", logs.AllUntimed())
	}
}
