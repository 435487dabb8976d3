package runner

import "errors"

type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// Permanent marks an error that retrying cannot fix (a 400 from a function,
// a rejected message); the engine skips the remaining retries and applies
// MV_ON_FAILURE at once.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err}
}

// IsPermanent reports whether err, or an error it wraps, was marked Permanent.
func IsPermanent(err error) bool {
	var p *permanentError
	return errors.As(err, &p)
}

type fatalError struct{ err error }

func (e *fatalError) Error() string { return e.err.Error() }
func (e *fatalError) Unwrap() error { return e.err }

// Fatal marks an error after which the runner must stop and exit non-zero,
// such as a sidecar that stayed away past MV_UDF_RECONNECT_TIMEOUT. Unacked
// messages are then redelivered by the source.
func Fatal(err error) error {
	if err == nil {
		return nil
	}
	return &fatalError{err}
}

// IsFatal reports whether err, or an error it wraps, was marked Fatal.
func IsFatal(err error) bool {
	var f *fatalError
	return errors.As(err, &f)
}

type unavailableError struct{ err error }

func (e *unavailableError) Error() string { return e.err.Error() }
func (e *unavailableError) Unwrap() error { return e.err }

// Unavailable marks an error that says the peer is away (the connection was
// refused or lost, a sidecar is restarting) and nothing about the message.
// The engine retries such a message on its own schedule, 10ms doubling to
// 1s, the one it uses for a call that failed as a whole: it spends none of
// the MV_RETRY_* steps and never reaches MV_ON_FAILURE, because sending a
// message to the fallback sink for an outage of the primary would move the
// whole stream there. An adapter marks per-message errors with it; a whole
// call's error is treated this way already.
func Unavailable(err error) error {
	if err == nil {
		return nil
	}
	return &unavailableError{err}
}

// IsUnavailable reports whether err, or an error it wraps, was marked
// Unavailable.
func IsUnavailable(err error) bool {
	var u *unavailableError
	return errors.As(err, &u)
}
