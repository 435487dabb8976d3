package jetstream

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

func TestAckError(t *testing.T) {
	noResp := nats.Header{}
	noResp.Set("Status", "503")
	for _, c := range []struct {
		body   string
		header nats.Header
		want   error // nil: stored
	}{
		{`{"stream":"S","seq":1}`, nil, nil},
		{`{"stream":"S","seq":18446744073709551615,"duplicate":true}`, nil, nil},
		{`{"stream":"S","domain":"hub","seq":2}`, nil, nil},
		{`{ "stream" : "S", "seq": 2 }`, nil, nil},
		{`{"error":{"code":400,"err_code":10054,"description":"wrong last sequence"},"stream":"S","seq":0}`, nil, &jetstream.APIError{}},
		{`{"stream":"","seq":1}`, nil, errInvalidAck},
		{`{"seq":1}`, nil, errInvalidAck},
		{`[1,2]`, nil, errInvalidAck},
		{`{"stream":"S","seq":1`, nil, errInvalidAck},
		{`{"stream":"S","seq":"x"}`, nil, errInvalidAck},
		{`{"stream":"S","seq":-1}`, nil, errInvalidAck},
		{`{"stream":"S","seq":1,"duplicate":"yes"}`, nil, errInvalidAck},
		{``, noResp, errNoResponders},
		{``, nil, errInvalidAck},
	} {
		err := ackError(&nats.Msg{Data: []byte(c.body), Header: c.header})
		switch want := c.want.(type) {
		case nil:
			if err != nil {
				t.Errorf("%q: %v, want stored", c.body, err)
			}
		case *jetstream.APIError:
			var got *jetstream.APIError
			if !errors.As(err, &got) {
				t.Errorf("%q: %v, want the stream's error", c.body, err)
			}
		default:
			if !errors.Is(err, want) {
				t.Errorf("%q: %v, want %v", c.body, err, want)
			}
		}
	}
}

// FuzzPlainPubAck: what the fast path takes as a stored message,
// encoding/json also decodes as an ack naming a stream, with no error.
func FuzzPlainPubAck(f *testing.F) {
	for _, s := range []string{
		`{"stream":"S","seq":1}`, `{"stream":"S","seq":0,"duplicate":true}`, `{"stream":"S","seq":01}`,
		`{"stream":"S\"","seq":1}`, `{"stream":"S","seq":18446744073709551616}`, `{"stream":"é","seq":1}`,
		`{"stream":"S","seq":1,"duplicate":false}`, `{"stream":"S","seq":1}}`, `{"stream":"","seq":1}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if !plainPubAck(b) {
			return
		}
		var pa struct {
			Stream    string              `json:"stream"`
			Seq       uint64              `json:"seq"`
			Duplicate bool                `json:"duplicate"`
			Error     *jetstream.APIError `json:"error"`
		}
		if err := json.Unmarshal(b, &pa); err != nil || pa.Stream == "" || pa.Error != nil {
			t.Fatalf("fast path took %q; encoding/json: %v %+v", b, err, pa)
		}
	})
}

// FuzzOnAck: whatever arrives on the inbox, the publisher neither panics
// nor counts a publish twice, and settles only the one it names.
func FuzzOnAck(f *testing.F) {
	f.Add("0.1", []byte(`{"stream":"S","seq":1}`))
	f.Add("0.9", []byte(`{"stream":"S","seq":1}`))
	f.Add("1.0", []byte(`x`))
	f.Add("0.-1", []byte(``))
	f.Add("z.00", []byte(`{"error":{"code":1}}`))
	f.Fuzz(func(t *testing.T, tail string, data []byte) {
		p := &publisher{prefix: "_INBOX.t.", max: 8, writes: map[uint64]*pubWrite{}}
		w := &pubWrite{errs: make([]error, 4), state: make([]pubState, 4), done: make(chan struct{}), published: true}
		p.writes[0] = w
		for i := range w.state {
			w.state[i] = pubWaiting
		}
		w.left, p.pending = 4, 4
		p.onAck(&nats.Msg{Subject: p.prefix + tail, Data: data})
		p.onAck(&nats.Msg{Subject: p.prefix + tail, Data: data})
		settled := 0
		for _, s := range w.state {
			if s != pubWaiting {
				settled++
			}
		}
		if settled > 1 || w.left != 4-settled || p.pending != 4-settled {
			t.Fatalf("subject tail %q: %d settled, left %d, pending %d", tail, settled, w.left, p.pending)
		}
	})
}
