// Package cereply is how a CloudEvents function answers the runner's
// CloudEvents transformer, written once for cmd/example-function (which is
// deployed) and internal/cetest (which serves functions in tests), so the
// example and the conformance suite's function behave alike: data "drop"
// gets 202 Accepted without a body, "fanout" a batch of three events, and
// anything else one reply event.
package cereply

import (
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/cloudevents/sdk-go/v2/event"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
)

// Reply answers 200 with ev in binary mode.
func Reply(w http.ResponseWriter, r *http.Request, ev event.Event) error {
	return cehttp.WriteResponseWriter(r.Context(), binding.ToMessage(&ev), http.StatusOK, w)
}

// Batch answers 200 with evs as application/cloudevents-batch+json; if
// they cannot be encoded it answers 500 and returns the error.
func Batch(w http.ResponseWriter, evs []event.Event) error {
	for i := range evs {
		// In JSON, data_base64 carries any bytes unchanged; inline "data"
		// would need a JSON content type and valid JSON.
		evs[i].DataBase64 = len(evs[i].DataEncoded) > 0
	}
	b, err := json.Marshal(evs)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return err
	}
	w.Header().Set("Content-Type", event.ApplicationCloudEventsBatchJSON)
	_, _ = w.Write(b)
	return nil
}

// Reference answers ev with the reference behaviour: data "drop" gets 202,
// "fanout" a batch of three replies with the ids <id>-0, -1 and -2, and
// anything else one reply. reply makes a reply event from ev.
func Reference(w http.ResponseWriter, r *http.Request, ev *event.Event, reply func(*event.Event) event.Event) error {
	switch string(ev.Data()) {
	case "drop":
		w.WriteHeader(http.StatusAccepted)
		return nil
	case "fanout":
		evs := make([]event.Event, 3)
		for i := range evs {
			evs[i] = reply(ev)
			evs[i].SetID(fmt.Sprintf("%s-%d", ev.ID(), i))
		}
		return Batch(w, evs)
	}
	return Reply(w, r, reply(ev))
}
