package runner

import (
	"errors"
	"time"
)

// markedError wraps an error with a kind the engine acts on. The kind is a
// type parameter so that each mark is its own type to errors.As and one
// mark never answers for another.
type markedError[K any] struct{ err error }

func (e *markedError[K]) Error() string { return e.err.Error() }
func (e *markedError[K]) Unwrap() error { return e.err }

// mark wraps err as kind K; nil stays nil so that callers can mark a result
// without checking it first.
func mark[K any](err error) error {
	if err == nil {
		return nil
	}
	return &markedError[K]{err}
}

// isMarked reports whether err, or an error it wraps, was marked as kind K.
func isMarked[K any](err error) bool {
	if err == nil {
		// Most calls ask about a call that succeeded: errors.As would still
		// allocate the target.
		return false
	}
	var m *markedError[K]
	return errors.As(err, &m)
}

// The kinds of mark.
type (
	permanentKind   struct{}
	fatalKind       struct{}
	unavailableKind struct{}
)

// Permanent marks an error that retrying cannot fix (a 400 from a function,
// a rejected message); the engine skips the remaining retries and applies
// MV_ON_FAILURE at once.
func Permanent(err error) error { return mark[permanentKind](err) }

// IsPermanent reports whether err, or an error it wraps, was marked Permanent.
func IsPermanent(err error) bool { return isMarked[permanentKind](err) }

// Fatal marks an error after which the runner must stop and exit non-zero,
// such as a sidecar that stayed away past MV_UDF_RECONNECT_TIMEOUT. Unacked
// messages are then redelivered by the source.
func Fatal(err error) error { return mark[fatalKind](err) }

// IsFatal reports whether err, or an error it wraps, was marked Fatal.
func IsFatal(err error) bool { return isMarked[fatalKind](err) }

// Unavailable marks an error that says the peer is away (the connection was
// refused or lost, a sidecar is restarting) and nothing about the message.
// The engine retries such a message on its own schedule, 10ms doubling to
// 1s, the one it uses for a call that failed as a whole: it spends none of
// the MV_RETRY_* steps and never reaches MV_ON_FAILURE, because sending a
// message to the fallback sink for an outage of the primary would move the
// whole stream there. An adapter marks per-message errors with it; a whole
// call's error is treated this way already.
func Unavailable(err error) error { return mark[unavailableKind](err) }

// IsUnavailable reports whether err, or an error it wraps, was marked
// Unavailable.
func IsUnavailable(err error) bool { return isMarked[unavailableKind](err) }

// retryAfterError is an error whose peer asked for a wait before the next
// try.
type retryAfterError struct {
	err error
	d   time.Duration
}

func (e *retryAfterError) Error() string { return e.err.Error() }
func (e *retryAfterError) Unwrap() error { return e.err }

// RetryAfter marks err, a failure the engine retries, with how long its
// peer asked to wait before the next try (an HTTP Retry-After on a 429 or
// 503, already bounded by the adapter): the engine's backoff before that
// retry is at least d. The try still spends a retry step.
func RetryAfter(err error, d time.Duration) error {
	if err == nil || d <= 0 {
		return err
	}
	return &retryAfterError{err, d}
}

// RetryAfterOf is the wait err asked for with RetryAfter, 0 if none.
func RetryAfterOf(err error) time.Duration {
	var ra *retryAfterError
	if err != nil && errors.As(err, &ra) {
		return ra.d
	}
	return 0
}
