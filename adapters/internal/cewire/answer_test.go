package cewire

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"
)

// answerReader is raw buffered as the direct path's reader holds an answer
// that arrived in one piece.
func answerReader(t testing.TB, raw []byte) *bufio.Reader {
	t.Helper()
	br := bufio.NewReaderSize(bytes.NewReader(raw), directIO)
	_, _ = br.Peek(1)
	return br
}

var postReq = &http.Request{Method: http.MethodPost}

// sameAnswer fails unless got, read by parseAnswer from raw, is what
// http.ReadResponse reads from it: status, protocol, header, length and
// closing, the body and its end, and the bytes left after it.
func sameAnswer(t *testing.T, raw []byte, got *http.Response, gotRest *bufio.Reader) {
	t.Helper()
	wantRest := bufio.NewReader(bytes.NewReader(raw))
	want, err := http.ReadResponse(wantRest, postReq)
	if err != nil {
		t.Fatalf("parseAnswer took %q, which http.ReadResponse refuses: %v", raw, err)
	}
	type fields struct {
		Status               string
		StatusCode           int
		Proto                string
		ProtoMajor, ProtoMin int
		Header, Trailer      http.Header
		ContentLength        int64
		TransferEncoding     []string
		Close, Uncompressed  bool
		Request              *http.Request
	}
	f := func(r *http.Response) fields {
		return fields{r.Status, r.StatusCode, r.Proto, r.ProtoMajor, r.ProtoMinor, r.Header, r.Trailer, r.ContentLength, r.TransferEncoding, r.Close, r.Uncompressed, r.Request}
	}
	if !reflect.DeepEqual(f(got), f(want)) {
		t.Fatalf("answer %q:\nparseAnswer     %+v\nhttp.ReadResponse %+v", raw, f(got), f(want))
	}
	gotBody, gotErr := io.ReadAll(got.Body)
	wantBody, wantErr := io.ReadAll(want.Body)
	if !bytes.Equal(gotBody, wantBody) || !errors.Is(gotErr, wantErr) && gotErr != wantErr {
		t.Fatalf("answer %q: body %q (%v), http.ReadResponse's %q (%v)", raw, gotBody, gotErr, wantBody, wantErr)
	}
	if (got.Body == http.NoBody) != (want.Body == http.NoBody) {
		t.Fatalf("answer %q: body is NoBody %v, http.ReadResponse's %v", raw, got.Body == http.NoBody, want.Body == http.NoBody)
	}
	gotLeft, _ := io.ReadAll(gotRest)
	wantLeft, _ := io.ReadAll(wantRest)
	if !bytes.Equal(gotLeft, wantLeft) {
		t.Fatalf("answer %q: %q left after it, after http.ReadResponse's %q", raw, gotLeft, wantLeft)
	}
}

// FuzzAnswerMatchesNetHTTP checks that whatever bytes arrive, an answer
// parseAnswer takes is the answer http.ReadResponse reads, and that one it
// declines is left unread for http.ReadResponse.
func FuzzAnswerMatchesNetHTTP(f *testing.F) {
	f.Add([]byte("HTTP/1.1 200 OK\r\nCe-Id: 1\r\nCe-Source: /s\r\nCe-Specversion: 1.0\r\nCe-Type: t\r\nContent-Type: application/json\r\nContent-Length: 7\r\nDate: Sat, 05 Dec 2026 02:00:00 GMT\r\n\r\n{\"a\":1}"))
	f.Add([]byte("HTTP/1.1 202 Accepted\r\nContent-Length: 0\r\n\r\n"))
	f.Add([]byte("HTTP/1.1 500 Internal Server Error\r\ncontent-length: 5\r\nx-a:  b \r\nX-A: c\r\n\r\noops!HTTP/1.1 200 OK\r\n"))
	f.Add([]byte("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort"))
	f.Add([]byte("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n"))
	f.Add([]byte("HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nhi"))
	f.Add([]byte("HTTP/1.1 200\r\nContent-Length: 2\r\nConnection: close\r\n\r\nhi"))
	f.Add([]byte("HTTP/1.1 204 No Content\r\nContent-Length: 2\r\n\r\nhi"))
	f.Add([]byte("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n folded\r\n\r\nhi"))
	f.Add([]byte("HTTP/1.1 200 OK\nContent-Length: 2\n\nhi"))
	f.Fuzz(func(t *testing.T, raw []byte) {
		br := answerReader(t, raw)
		got := parseAnswer(br, postReq)
		if got == nil {
			if br.Buffered() != min(len(raw), directIO) {
				t.Fatalf("parseAnswer declined %q but consumed %d bytes", raw, min(len(raw), directIO)-br.Buffered())
			}
			return
		}
		sameAnswer(t, raw, got, br)
	})
}

// TestParseAnswerTakesTheCommonAnswer checks which answers take the fast
// path: those a function commonly sends, whatever the case of their keys.
// Every other one goes to http.ReadResponse, which the fuzz test covers.
func TestParseAnswerTakesTheCommonAnswer(t *testing.T) {
	for _, tc := range []struct {
		raw  string
		fast bool
	}{
		{"HTTP/1.1 200 OK\r\nCe-Id: 1\r\nContent-Length: 3\r\n\r\nabc", true},
		{"HTTP/1.1 200 OK\r\nce-id: 1\r\ncontent-length: 3\r\n\r\nabc", true},
		{"HTTP/1.1 202 Accepted\r\nContent-Length: 0\r\n\r\n", true},
		{"HTTP/1.1 400 Bad Request\r\nContent-Length: 3\r\nX: a\r\nX: b\r\n\r\nbad", true},
		{"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n", false},
		{"HTTP/1.1 200 OK\r\n\r\n", false},
		{"HTTP/1.0 200 OK\r\nContent-Length: 3\r\n\r\nabc", false},
		{"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nConnection: close\r\n\r\nabc", false},
		{"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", false},
		{"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\nabc", false},
		{"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n", false}, // not whole yet
		{"HTTP/1.1 200 OK\r\nBad Key: 1\r\nContent-Length: 3\r\n\r\nabc", false},
	} {
		br := answerReader(t, []byte(tc.raw))
		got := parseAnswer(br, postReq)
		if (got != nil) != tc.fast {
			t.Errorf("%q: fast path %v, want %v", tc.raw, got != nil, tc.fast)
			continue
		}
		if got != nil {
			sameAnswer(t, []byte(tc.raw), got, br)
		}
	}
}

// TestReadAnswerFallsBackWithNothingLost checks that an answer the fast
// path declines, and one that arrives in pieces, is read whole by
// http.ReadResponse, and that the connection's errors come through.
func TestReadAnswerFallsBackWithNothingLost(t *testing.T) {
	chunked := "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n"
	resp, err := readAnswer(bufio.NewReader(strings.NewReader(chunked)), postReq)
	if err != nil {
		t.Fatal(err)
	}
	if body, err := io.ReadAll(resp.Body); err != nil || string(body) != "abc" {
		t.Fatalf("chunked body %q, %v", body, err)
	}
	// One byte a read: the header is never buffered whole at first.
	resp, err = readAnswer(bufio.NewReader(&oneByteReader{r: strings.NewReader("HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabc")}), postReq)
	if err != nil {
		t.Fatal(err)
	}
	if body, err := io.ReadAll(resp.Body); err != nil || string(body) != "abc" {
		t.Fatalf("body read in pieces %q, %v", body, err)
	}
	if _, err := readAnswer(bufio.NewReader(strings.NewReader("")), postReq); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("no answer: %v, want io.ErrUnexpectedEOF as http.ReadResponse", err)
	}
	body := &answerBody{r: bufio.NewReader(strings.NewReader("ab")), n: 3}
	if b, err := io.ReadAll(body); string(b) != "ab" || !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("short body: %q, %v", b, err)
	}
	if _, err := body.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("read after a short body's end: %v, want io.EOF as net/http's body", err)
	}
	head := &http.Request{Method: http.MethodHead}
	if resp := parseAnswer(answerReader(t, []byte("HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\n")), head); resp != nil {
		t.Fatal("an answer to HEAD took the fast path, which would read a body it has not")
	}
	if err := body.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := body.Read(make([]byte, 1)); !errors.Is(err, http.ErrBodyReadAfterClose) {
		t.Fatalf("read after close: %v", err)
	}
}

// oneByteReader returns at most one byte a read.
type oneByteReader struct{ r io.Reader }

func (o *oneByteReader) Read(p []byte) (int, error) {
	if len(p) > 1 {
		p = p[:1]
	}
	return o.r.Read(p)
}
