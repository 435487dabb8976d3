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
