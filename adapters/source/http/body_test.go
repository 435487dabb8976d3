package http

import (
	"bytes"
	"context"
	"encoding/base64"
	"net"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/monovertex/monovertex/runner"
)

// TestDeclaredLengthsThatAreWrong sends bodies whose Content-Length is not
// what arrives: a short body is 400 and queues nothing, bytes past the
// length are not the message's.
func TestDeclaredLengthsThatAreWrong(t *testing.T) {
	cfg := testConfig()
	src, url := start(t, cfg)
	for _, n := range []int{100, presizeLimit + 100} {
		conn := rawRequest(t, url, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: "+strconv.Itoa(n), string(bytes.Repeat([]byte("s"), n/2)))
		_ = conn.(*net.TCPConn).CloseWrite()
		if resp := readResponse(t, conn, 10*time.Second); resp.StatusCode != http.StatusBadRequest {
			t.Fatalf("%d promised, %d sent: answer %d, want 400", n, n/2, resp.StatusCode)
		}
		if p, _ := src.Pending(context.Background()); p != 0 {
			t.Fatalf("%d promised, %d sent: a short body was queued", n, n/2)
		}
	}
	waitUsed(t, src, func(u int64) bool { return u == 0 }, "0 after short bodies")

	conn := rawRequest(t, url, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 10", "0123456789 and more")
	m := readN(t, src, 1)[0]
	if string(m.Value) != "0123456789" {
		t.Fatalf("value %q, want the 10 declared bytes", m.Value)
	}
	_ = src.Ack(context.Background(), []*runner.Message{m})
	if resp := readResponse(t, conn, 10*time.Second); resp.StatusCode != http.StatusOK {
		t.Fatalf("long body: answer %d, want 200", resp.StatusCode)
	}
}

// TestALargeBodyArrivingInPiecesIsWhole sends a body above the first buffer
// in slow pieces, so the buffer grows to the declared length mid-body.
func TestALargeBodyArrivingInPiecesIsWhole(t *testing.T) {
	cfg := testConfig()
	src, url := start(t, cfg)
	body := bytes.Repeat([]byte("0123456789abcdef"), (1<<20)/16)
	conn := rawRequest(t, url, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: "+strconv.Itoa(len(body)), "")
	for _, piece := range [][]byte{body[:10], body[10 : presizeLimit+1], body[presizeLimit+1 : 600<<10], body[600<<10:]} {
		time.Sleep(20 * time.Millisecond)
		if _, err := conn.Write(piece); err != nil {
			t.Fatal(err)
		}
	}
	m := readN(t, src, 1)[0]
	if !bytes.Equal(m.Value, body) {
		t.Fatalf("value of %d bytes differs from the %d sent", len(m.Value), len(body))
	}
	if u := src.budget.Used(); u != int64(len(body)) {
		t.Fatalf("budget holds %d bytes for a body of %d", u, len(body))
	}
	_ = src.Ack(context.Background(), []*runner.Message{m})
	if resp := readResponse(t, conn, 10*time.Second); resp.StatusCode != http.StatusOK {
		t.Fatalf("answer %d, want 200", resp.StatusCode)
	}
}

// TestValuesOutliveTheirConnection checks that a body's buffer is never
// reused: the messages of earlier requests on the same kept-alive
// connection keep their bytes while later requests arrive, for plain bodies
// and for binary CloudEvents, whose data is the body itself.
func TestValuesOutliveTheirConnection(t *testing.T) {
	src, url := start(t, testConfig())
	client := &http.Client{Transport: &http.Transport{MaxConnsPerHost: 1}}
	defer client.CloseIdleConnections()
	var held []*runner.Message
	var want [][]byte
	for i := range 6 {
		body := bytes.Repeat([]byte{byte('a' + i)}, 100<<10+i)
		var h http.Header
		if i%2 == 1 {
			h = hdr("Ce-Specversion", "1.0", "Ce-Id", "ev"+strconv.Itoa(i), "Ce-Source", "/s", "Ce-Type", "t")
		}
		ch := do(client, url, h, bytes.NewReader(body), int64(len(body)))
		m := readN(t, src, 1)[0]
		_ = src.Ack(context.Background(), []*runner.Message{m})
		if r := await(t, ch); r.status != http.StatusOK {
			t.Fatalf("request %d: %d", i, r.status)
		}
		held, want = append(held, m), append(want, body)
		for j, h := range held {
			if !bytes.Equal(h.Value, want[j]) {
				t.Fatalf("after request %d the value of request %d changed", i, j)
			}
		}
	}
}

// TestPooledBodiesGoBackOnlyThroughTheirMessage checks the buffers a body
// with a length past the first buffer is read into (package payloadpool):
// a message whose value is the body carries its Release, for the engine to
// call after the ack; a message decoded out of the body (a structured
// CloudEvent) does not hold it, and its value survives the buffer's reuse
// by the requests after it.
func TestPooledBodiesGoBackOnlyThroughTheirMessage(t *testing.T) {
	src, url := start(t, testConfig())
	client := &http.Client{Transport: &http.Transport{MaxConnsPerHost: 1}}
	defer client.CloseIdleConnections()
	post := func(h http.Header, body []byte) *runner.Message {
		t.Helper()
		ch := do(client, url, h, bytes.NewReader(body), int64(len(body)))
		m := readN(t, src, 1)[0]
		_ = src.Ack(context.Background(), []*runner.Message{m})
		if r := await(t, ch); r.status != http.StatusOK {
			t.Fatalf("answer %d", r.status)
		}
		return m
	}
	const size = 200 << 10
	if m := post(nil, bytes.Repeat([]byte("s"), 1000)); m.Release != nil {
		t.Fatal("a small body's message has a Release")
	}
	data := bytes.Repeat([]byte("d"), size)
	structured := []byte(`{"specversion":"1.0","id":"st","source":"/s","type":"t","datacontenttype":"application/octet-stream","data_base64":"` +
		base64.StdEncoding.EncodeToString(data) + `"}`)
	held := post(hdr("Content-Type", "application/cloudevents+json"), structured)
	if held.Release != nil || !bytes.Equal(held.Value, data) {
		t.Fatalf("structured event: Release set %v, value of %d bytes", held.Release != nil, len(held.Value))
	}
	for i := range 6 {
		body := bytes.Repeat([]byte{byte('a' + i)}, len(structured))
		var h http.Header
		if i%2 == 1 {
			h = hdr("Ce-Specversion", "1.0", "Ce-Id", "ev"+strconv.Itoa(i), "Ce-Source", "/s", "Ce-Type", "t")
		}
		m := post(h, body)
		if m.Release == nil || !bytes.Equal(m.Value, body) {
			t.Fatalf("request %d: Release set %v, value intact %v", i, m.Release != nil, bytes.Equal(m.Value, body))
		}
		m.Release() // as the engine does after the ack
		if !bytes.Equal(held.Value, data) {
			t.Fatalf("after request %d reused a buffer, the structured event's value changed", i)
		}
	}
}
