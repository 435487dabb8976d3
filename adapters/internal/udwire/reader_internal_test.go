package udwire

import (
	"bytes"
	"errors"
	"io"
	"testing"
)

// stalled returns its bytes, then nothing and no error, for ever.
type stalled struct{ r io.Reader }

func (s *stalled) Read(p []byte) (int, error) {
	n, _ := s.r.Read(p)
	return n, nil
}

// TestAReaderThatStallsFailsWithNoProgress: the bytes a reader returned
// are read, and then a reader that returns nothing and no error fails
// each kind of read with io.ErrNoProgress instead of spinning, as bufio's
// does: a read through the buffer, a read straight into a large part, a
// byte, a discard.
func TestAReaderThatStallsFailsWithNoProgress(t *testing.T) {
	b := newReader(&stalled{bytes.NewReader([]byte("0123456789"))}, nil, 4)
	got := make([]byte, 3)
	if err := b.readFull(got); err != nil || string(got) != "012" {
		t.Fatalf("readFull = %q, %v", got, err)
	}
	if c, err := b.readByte(); err != nil || c != '3' {
		t.Fatalf("readByte = %q, %v", c, err)
	}
	got = make([]byte, 6) // larger than the buffer: read straight into it
	if err := b.readFull(got); err != nil || string(got) != "456789" {
		t.Fatalf("readFull = %q, %v", got, err)
	}
	for name, read := range map[string]func() error{
		"readFull, buffered": func() error { return b.readFull(make([]byte, 2)) },
		"readFull, direct":   func() error { return b.readFull(make([]byte, 8)) },
		"readByte":           func() error { _, err := b.readByte(); return err },
		"discard":            func() error { return b.discard(1) },
	} {
		if err := read(); !errors.Is(err, io.ErrNoProgress) {
			t.Errorf("%s after the end: %v, want io.ErrNoProgress", name, err)
		}
	}
}
