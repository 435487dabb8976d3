package cewire

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"net/textproto"
)

// readAnswer reads an answer's status line and header from br, as
// http.ReadResponse does. The common answer of a function (HTTP/1.1,
// CRLF line ends, one Content-Length, no header net/http treats specially)
// is parsed from the bytes already buffered, with one string for the whole
// header instead of one per key and value; any other answer, or one whose
// header is not buffered whole yet, is left to http.ReadResponse, having
// consumed nothing. FuzzAnswerMatchesNetHTTP holds the two to the same
// result (the body's Close aside: see answerBody).
func readAnswer(br *bufio.Reader, req *http.Request) (*http.Response, error) {
	// Wait for the answer's first bytes, as ReadResponse's first read would.
	if _, err := br.Peek(1); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	if resp := parseAnswer(br, req); resp != nil {
		return resp, nil
	}
	return http.ReadResponse(br, req)
}

// answerProto is the only protocol version parseAnswer takes: an
// HTTP/1.0 answer closes the connection unless it says otherwise.
const answerProto = "HTTP/1.1 "

// parseAnswer parses the answer at the start of br's buffer and consumes
// its header, or returns nil having consumed nothing.
func parseAnswer(br *bufio.Reader, req *http.Request) *http.Response {
	if req != nil && req.Method == http.MethodHead {
		// An answer to HEAD has no body whatever it announces.
		return nil
	}
	buf, _ := br.Peek(br.Buffered())
	end := bytes.Index(buf, []byte("\r\n\r\n"))
	if end < 0 || !bytes.HasPrefix(buf, []byte(answerProto)) {
		return nil
	}
	// One copy of the header for every string in the answer.
	block := string(buf[:end+2])
	line, rest := cutLine(block)
	// "HTTP/1.1 ddd" and an optional reason after a space.
	status := line[len(answerProto):]
	if len(status) < 3 || (len(status) > 3 && status[3] != ' ') {
		return nil
	}
	code := 0
	for i := 0; i < 3; i++ {
		c := status[i]
		if c < '0' || c > '9' {
			return nil
		}
		code = code*10 + int(c-'0')
	}
	// 1xx, 204 and 304 answers have no body whatever they announce.
	if code < 200 || code == http.StatusNoContent || code == http.StatusNotModified || !plainLine(status) {
		return nil
	}
	// One backing array for the values, each key its own full-capacity
	// slice of it, as textproto does.
	n := 0
	for i := 0; i+1 < len(rest); i++ {
		if rest[i] == '\r' && rest[i+1] == '\n' {
			n++
		}
	}
	h := make(http.Header, n)
	vals := make([]string, 0, n)
	length := int64(-1)
	for rest != "" {
		line, rest = cutLine(rest)
		if line == "" || line[0] == ' ' || line[0] == '\t' || !plainLine(line) {
			// A continued line, or a bare CR or LF: textproto's rules.
			return nil
		}
		colon := -1
		for i := 0; i < len(line); i++ {
			if line[i] == ':' {
				colon = i
				break
			}
			if !tokenByte(line[i]) {
				return nil
			}
		}
		if colon <= 0 {
			return nil
		}
		key := textproto.CanonicalMIMEHeaderKey(line[:colon])
		value := trimBlank(line[colon+1:])
		switch key {
		case "Content-Length":
			if length >= 0 {
				return nil
			}
			if length = digits(value); length < 0 {
				return nil
			}
		case "Transfer-Encoding", "Trailer", "Connection", "Pragma":
			// Chunked bodies, trailers, closing and the Pragma rewrite are
			// http.ReadResponse's.
			return nil
		}
		if vv := h[key]; vv != nil {
			h[key] = append(vv, value)
			continue
		}
		vals = append(vals, value)
		h[key] = vals[len(vals)-1 : len(vals) : len(vals)]
	}
	if length < 0 {
		// Without a Content-Length the body runs to the connection's close.
		return nil
	}
	if _, err := br.Discard(end + 4); err != nil {
		return nil // cannot happen: the bytes are buffered
	}
	resp := &http.Response{
		Status: status, StatusCode: code,
		Proto: answerProto[:len(answerProto)-1], ProtoMajor: 1, ProtoMinor: 1,
		Header: h, ContentLength: length, Request: req, Body: http.NoBody,
	}
	if length > 0 {
		resp.Body = &answerBody{r: br, n: length}
	}
	return resp
}

// cutLine splits s at its first CRLF.
func cutLine(s string) (line, rest string) {
	for i := 0; i+1 < len(s); i++ {
		if s[i] == '\r' && s[i+1] == '\n' {
			return s[:i], s[i+2:]
		}
	}
	return s, ""
}

// plainLine reports whether s holds only bytes a header value may hold
// (textproto's validHeaderValueByte: tab, visible ASCII, space, and
// obs-text), so no bare CR or LF.
func plainLine(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < ' ' && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}

// tokenByte reports whether c may appear in a header's name (RFC 7230's
// tchar, textproto's validHeaderFieldByte).
func tokenByte(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	switch c {
	case '!', '#', '$', '%', '&', '\'', '*', '+', '-', '.', '^', '_', '`', '|', '~':
		return true
	}
	return false
}

// trimBlank trims spaces and tabs at both ends, as textproto does.
func trimBlank(s string) string {
	for s != "" && (s[0] == ' ' || s[0] == '\t') {
		s = s[1:]
	}
	for s != "" && (s[len(s)-1] == ' ' || s[len(s)-1] == '\t') {
		s = s[:len(s)-1]
	}
	return s
}

// digits is s as a decimal length of at most 18 digits, or -1.
func digits(s string) int64 {
	if s == "" || len(s) > 18 {
		return -1
	}
	var n int64
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return -1
		}
		n = n*10 + int64(s[i]-'0')
	}
	return n
}

// answerBody is the body of an answer parseAnswer read: length bytes from
// the connection's reader. Like net/http's, it says io.EOF with its last
// bytes, and io.ErrUnexpectedEOF (once, then io.EOF) when the connection
// ends before them. Unlike net/http's, it is read by one goroutine and its
// Close does not read the rest: directBody, which wraps it, decides the
// connection's fate from what was read.
type answerBody struct {
	r      *bufio.Reader
	n      int64 // bytes left
	closed bool
}

// Read reads the body.
func (b *answerBody) Read(p []byte) (int, error) {
	if b.closed {
		return 0, http.ErrBodyReadAfterClose
	}
	if b.n <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > b.n {
		p = p[:b.n]
	}
	n, err := b.r.Read(p)
	b.n -= int64(n)
	switch {
	case b.n == 0:
		return n, io.EOF
	case err == io.EOF:
		b.n = 0
		return n, io.ErrUnexpectedEOF
	}
	return n, err
}

// Close ends reading.
func (b *answerBody) Close() error {
	b.closed = true
	return nil
}
