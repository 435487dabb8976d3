package main

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// oauthListener makes every connection authenticate with SASL
// OAUTHBEARER (RFC 7628) and one of tokens before kfake sees any request
// but ApiVersions. kfake itself speaks only PLAIN and SCRAM; the gate
// answers the SASLHandshake and SASLAuthenticate requests itself, as a
// broker with an OAuth validator would, and then passes the connection's
// bytes through untouched. A client must wait for the ApiVersions answer
// before it starts SASL (franz-go and librdkafka do): the gate does not
// order its answers after kfake's.
type oauthListener struct {
	net.Listener
	tokens map[string]bool
}

func (l *oauthListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &oauthConn{Conn: c, tokens: l.tokens}, nil
}

// oauthConn is one client connection behind the gate.
type oauthConn struct {
	net.Conn
	tokens map[string]bool

	wmu     sync.Mutex // kfake's responses and the gate's never interleave
	authed  bool       // read side only
	pending []byte     // a frame passed to kfake, not yet read by it
}

func (c *oauthConn) Write(p []byte) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	return c.Conn.Write(p)
}

// Read hands kfake the client's bytes: before authentication only whole
// ApiVersions frames; SASL frames are answered here; any other request
// ends the connection, as a broker refuses an unauthenticated one.
func (c *oauthConn) Read(p []byte) (int, error) {
	for !c.authed && len(c.pending) == 0 {
		if err := c.gate(); err != nil {
			c.Conn.Close()
			return 0, err
		}
	}
	if len(c.pending) > 0 {
		n := copy(p, c.pending)
		c.pending = c.pending[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}

// gate reads one request frame and answers or passes it.
func (c *oauthConn) gate() error {
	var size [4]byte
	if _, err := io.ReadFull(c.Conn, size[:]); err != nil {
		return err
	}
	n := binary.BigEndian.Uint32(size[:])
	if n < 8 || n > 1<<20 {
		return fmt.Errorf("oauth gate: a request of %d bytes before authentication", n)
	}
	frame := make([]byte, n)
	if _, err := io.ReadFull(c.Conn, frame); err != nil {
		return err
	}
	key, version := int16(binary.BigEndian.Uint16(frame)), int16(binary.BigEndian.Uint16(frame[2:]))
	corr := frame[4:8]
	switch key {
	case kmsg.ApiVersions.Int16():
		c.pending = append(size[:], frame...)
		return nil
	case kmsg.SASLHandshake.Int16(), kmsg.SASLAuthenticate.Int16():
	default:
		return fmt.Errorf("oauth gate: request key %d before authentication", key)
	}
	req := kmsg.RequestForKey(key)
	req.SetVersion(version)
	body, err := skipHeader(frame[8:], req.IsFlexible())
	if err != nil {
		return err
	}
	if err := req.ReadFrom(body); err != nil {
		return fmt.Errorf("oauth gate: request key %d: %w", key, err)
	}
	var resp kmsg.Response
	refuse := false
	switch r := req.(type) {
	case *kmsg.SASLHandshakeRequest:
		hs := r.ResponseKind().(*kmsg.SASLHandshakeResponse)
		hs.SupportedMechanisms = []string{"OAUTHBEARER"}
		if r.Mechanism != "OAUTHBEARER" {
			hs.ErrorCode = kerr.UnsupportedSaslMechanism.Code
		}
		resp = hs
	case *kmsg.SASLAuthenticateRequest:
		ar := r.ResponseKind().(*kmsg.SASLAuthenticateResponse)
		if tok, ok := bearer(r.SASLAuthBytes); ok && c.tokens[tok] {
			c.authed = true
		} else {
			ar.ErrorCode = kerr.SaslAuthenticationFailed.Code
			msg := "invalid OAUTHBEARER token"
			ar.ErrorMessage = &msg
			refuse = true
		}
		resp = ar
	}
	resp.SetVersion(version)
	out := append([]byte{0, 0, 0, 0}, corr...)
	if resp.IsFlexible() {
		out = append(out, 0) // no tagged fields in the response header
	}
	out = resp.AppendTo(out)
	binary.BigEndian.PutUint32(out, uint32(len(out)-4))
	if _, err := c.Write(out); err != nil {
		return err
	}
	if refuse {
		return errors.New("oauth gate: authentication failed")
	}
	return nil
}

// skipHeader returns what follows the request header's client ID (and its
// tagged fields in a flexible header).
func skipHeader(b []byte, flexible bool) ([]byte, error) {
	if len(b) < 2 {
		return nil, errors.New("oauth gate: short request header")
	}
	if l := int16(binary.BigEndian.Uint16(b)); l > 0 {
		if len(b) < 2+int(l) {
			return nil, errors.New("oauth gate: short client ID")
		}
		b = b[2+int(l):]
	} else {
		b = b[2:]
	}
	if !flexible {
		return b, nil
	}
	tags, n := binary.Uvarint(b)
	if n <= 0 {
		return nil, errors.New("oauth gate: bad tagged fields")
	}
	b = b[n:]
	for ; tags > 0; tags-- {
		_, n := binary.Uvarint(b)
		if n <= 0 {
			return nil, errors.New("oauth gate: bad tag")
		}
		b = b[n:]
		size, n := binary.Uvarint(b)
		if n <= 0 || uint64(len(b)-n) < size {
			return nil, errors.New("oauth gate: bad tag size")
		}
		b = b[n+int(size):]
	}
	return b, nil
}

// bearer extracts the token of an OAUTHBEARER initial client response:
// "n,[a=authzid],\x01auth=Bearer <token>\x01[key=value\x01]...\x01".
func bearer(b []byte) (string, bool) {
	for _, kv := range bytes.Split(b, []byte{1}) {
		if tok, ok := bytes.CutPrefix(kv, []byte("auth=Bearer ")); ok && len(tok) > 0 {
			return string(tok), true
		}
	}
	return "", false
}
