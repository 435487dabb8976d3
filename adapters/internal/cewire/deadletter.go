package cewire

import (
	"encoding/base64"
	"errors"
	"net/http"
	"net/url"

	"github.com/cloudevents/sdk-go/v2/event"
)

// The extensions Knative puts on an event it delivers to a dead-letter
// sink (knative.dev/eventing v0.50.0,
// pkg/kncloudevents/attributes/knative_error.go), so a Trigger or tool
// built for Knative's dead letters reads the runner's fallback sink alike.
const (
	ErrorDestExtension = "knativeerrordest"
	ErrorCodeExtension = "knativeerrorcode"
	ErrorDataExtension = "knativeerrordata"
	// errorDataMax is KnativeErrorDataExtensionMaxLength: the most
	// characters of base64 knativeerrordata carries.
	errorDataMax = 1024
)

// ErrorBodyKept is how much of a refusal's body the client keeps: the
// bytes whose base64 fills errorDataMax characters. Knative reads the
// whole body, encodes it and keeps the first 1024 characters
// (dispatchExecutionInfoTransformers in pkg/kncloudevents/event_dispatcher.go);
// since 768 is a multiple of 3, those characters are exactly the encoding
// of the first 768 bytes, so nothing more need be read. (Knative v0.50.0's
// own code encodes into a 1024-byte buffer and panics on a body above 768
// bytes; the runner gives the truncation it means.)
const ErrorBodyKept = errorDataMax / 4 * 3

// SetDeadLetterExtensions adds Knative's knativeerrordest, knativeerrorcode
// and knativeerrordata to ev, from cause, the error that sent the message
// to the fallback sink: a refusal (*StatusError) gives its URL, status and
// body; a call that got no answer (*TransportError) its URL, 500 and
// "dispatch error: ..." as Knative's dispatcher records a failed call
// (executeRequest); any other failure (a sink that is not CloudEvents, a
// transformer) 500 and its text, without knativeerrordest, which is a URL.
// A nil cause (the sink asked for the fallback itself) adds nothing.
func SetDeadLetterExtensions(ev *event.Event, cause error) error {
	if cause == nil {
		return nil
	}
	var (
		status *StatusError
		te     *TransportError
		dest   string
		code   = http.StatusInternalServerError
		body   []byte
	)
	switch {
	case errors.As(cause, &status):
		dest, code, body = status.URL, status.Status, status.Raw
	case errors.As(cause, &te):
		dest, body = te.URL, []byte("dispatch error: "+te.Err.Error())
	default:
		body = []byte("dispatch error: " + cause.Error())
	}
	if dest != "" {
		u, err := url.Parse(dest)
		if err != nil {
			return err
		}
		if err := ev.Context.SetExtension(ErrorDestExtension, *u); err != nil {
			return err
		}
	}
	if err := ev.Context.SetExtension(ErrorCodeExtension, code); err != nil {
		return err
	}
	return ev.Context.SetExtension(ErrorDataExtension, ErrorData(body))
}

// ErrorData is knativeerrordata for a response body: its base64, cut to
// Knative's 1024 characters.
func ErrorData(body []byte) string {
	if len(body) > ErrorBodyKept {
		body = body[:ErrorBodyKept]
	}
	return base64.StdEncoding.EncodeToString(body)
}
