package http

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/monovertex/monovertex/adapters/internal/cewire"
	"github.com/monovertex/monovertex/internal/payloadpool"
	"github.com/monovertex/monovertex/runner"
)

// Body buffer sizes: what a buffer starts at before any byte arrived, with
// and without a Content-Length. Past them it doubles as it fills.
const (
	presizeLimit = 64 << 10
	firstChunk   = 4 << 10
)

// admissionWait is the longest a request waits for its first share of the
// in-flight budget before it is answered 503.
const admissionWait = time.Second

// giveBuffer hands the pooled body buffer to the message whose value it
// holds, for the engine to release after the ack, or releases it at once
// when no message holds it (events decoded from it, not aliasing it).
// Messages never share it: a batch whose values alias the body is left
// to the garbage collector.
func giveBuffer(msgs []*runner.Message, pooled *payloadpool.Buffer) {
	if pooled == nil {
		return
	}
	var holder *runner.Message
	for _, m := range msgs {
		if pooled.Backs(m.Value) {
			if holder != nil {
				return
			}
			holder = m
		}
	}
	if holder == nil {
		pooled.Release()
		return
	}
	holder.Release = pooled.Release
}

// readBody reads the whole body within MV_HTTP_BODY_TIMEOUT and
// MV_HTTP_MAX_BODY, charging its buffer to lease before each growth, and
// returns the status to answer if it cannot. A body with a length past
// the first buffer is read into a pooled buffer, returned with it.
func (s *Source) readBody(w http.ResponseWriter, r *http.Request, lease *cewire.Lease) ([]byte, *payloadpool.Buffer, int, error) {
	rc := http.NewResponseController(w)
	// The server has no read timeout (it would also cut the wait for the
	// ack), so bound the body here; then lift the bound so the server keeps
	// watching for the caller hanging up while the message is processed.
	// After a failed read the bound stays: the server then gives up on the
	// rest of the body at once and closes the connection.
	_ = rc.SetReadDeadline(time.Now().Add(s.cfg.BodyTimeout))
	body := http.MaxBytesReader(w, r.Body, s.cfg.MaxBody)
	// most is the largest the buffer may need to be: the promised length
	// (already checked against the limit) or the limit.
	most, size := s.cfg.MaxBody, int64(firstChunk)
	if n := r.ContentLength; n >= 0 {
		most, size = n, min(n, presizeLimit)
	}
	size = min(size, most)
	admit, cancel := context.WithTimeout(r.Context(), s.admissionWait)
	err := lease.Grow(admit, size)
	cancel()
	if err != nil {
		return nil, nil, budgetStatus(err), s.budgetError(err)
	}
	buf := make([]byte, 0, size)
	var pooled *payloadpool.Buffer
	fail := func(status int, err error) ([]byte, *payloadpool.Buffer, int, error) {
		pooled.Release()
		return nil, nil, status, err
	}
	for {
		if len(buf) == cap(buf) {
			// Doubling, with or without a declared length: the budget
			// follows the bytes that arrived (at most twice them), so a
			// caller that declares 64 MiB and sends 64 KiB holds 128 KiB,
			// not 64 MiB, and four such callers cannot spend the budget
			// of everyone else. The last step is the declared length.
			next := min(2*int64(cap(buf)), most)
			if next <= int64(cap(buf)) {
				// Full at the most the body may hold: only its end may
				// follow. More than that is MaxBytesReader's error.
				var probe [1]byte
				n, err := body.Read(probe[:])
				switch {
				case err == io.EOF && n == 0:
					_ = rc.SetReadDeadline(time.Time{})
					return buf, pooled, 0, nil
				case err == nil && n == 0:
					continue
				case err == nil || err == io.EOF:
					err = &http.MaxBytesError{Limit: s.cfg.MaxBody}
				}
				return fail(s.readError(err))
			}
			if err := lease.Grow(r.Context(), next-int64(cap(buf))); err != nil {
				return fail(budgetStatus(err), s.budgetError(err))
			}
			var grown []byte
			if r.ContentLength >= 0 {
				// Pooled at every step, the step before given back at
				// once: the last one holds the value, which the engine
				// gives back once the message is acked. Not cleared:
				// every byte is read into it before it is used.
				nb := payloadpool.Get(int(next))
				grown = nb.B[:len(buf):len(nb.B)]
				copy(grown, buf)
				pooled.Release()
				pooled = nb
			} else {
				grown = make([]byte, len(buf), next)
				copy(grown, buf)
			}
			buf = grown
		}
		n, err := body.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			_ = rc.SetReadDeadline(time.Time{})
			return buf, pooled, 0, nil
		}
		if err != nil {
			return fail(s.readError(err))
		}
	}
}

// readError is the answer to a body that could not be read.
func (s *Source) readError(err error) (int, error) {
	var tooLarge *http.MaxBytesError
	var ne net.Error
	switch {
	case errors.As(err, &tooLarge):
		return http.StatusRequestEntityTooLarge, fmt.Errorf("body is above MV_HTTP_MAX_BODY=%d bytes", s.cfg.MaxBody)
	case errors.Is(err, os.ErrDeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()):
		return http.StatusRequestTimeout, fmt.Errorf("body did not arrive within MV_HTTP_BODY_TIMEOUT=%s", s.cfg.BodyTimeout)
	}
	return http.StatusBadRequest, fmt.Errorf("read body: %v", err)
}

// budgetStatus is the answer to a body that found the in-flight budget
// spent: 413 if it could never fit (Validate rules that out), else 503.
func budgetStatus(err error) int {
	if errors.Is(err, cewire.ErrBudgetExceeded) {
		return http.StatusRequestEntityTooLarge
	}
	return http.StatusServiceUnavailable
}

func (s *Source) budgetError(err error) error {
	if errors.Is(err, cewire.ErrBudgetExceeded) {
		return fmt.Errorf("body is above MV_HTTP_MAX_INFLIGHT_BYTES=%d", s.cfg.MaxInflight)
	}
	return fmt.Errorf("MV_HTTP_MAX_INFLIGHT_BYTES=%d of request bodies are held by other requests; retry later", s.cfg.MaxInflight)
}
