// Command example-function is a CloudEvents function to deploy as a Knative
// Service and call from the runner with MV_TRANSFORMER=cloudevents:
//
//	kn service create example-function \
//	  --image ko://github.com/monovertex/monovertex/cmd/example-function
//
// It listens on $PORT (default 8080) and answers each event it receives:
//
//   - data "drop": 202 Accepted without a body, so the runner drops the message;
//   - data "fanout": a batch (application/cloudevents-batch+json) of three
//     copies of the event, so the runner writes three messages;
//   - anything else: the event itself as the reply.
//
// Every reply event carries the extension handledby=example-function, so
// the effect is visible at the sink; with UPPERCASE=true the function also
// upper-cases the data. With RESHAPE=true it instead reshapes the
// generator's JSON payloads ({"value","createdts","padding"}) into
// {"value","createdts","size"} of type "reshaped": the same work as the
// JSONata expression in hack/bench (ReshapeJSONata there), so the two can be
// compared per message. Malformed events get 400, which the runner treats as
// a permanent failure. This is the reference behaviour the transformer
// conformance suite expects, so the suite can run against this function.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"

	"github.com/monovertex/monovertex/internal/cereply"
)

// maxBody bounds the events the function accepts.
const maxBody = 64 << 20

func main() {
	port := os.Getenv("PORT")
	if port == "" {
		port = "8080"
	}
	upper, _ := strconv.ParseBool(os.Getenv("UPPERCASE"))
	reshape, _ := strconv.ParseBool(os.Getenv("RESHAPE"))
	srv := &http.Server{
		Addr:              ":" + port,
		Handler:           newHandler(upper, reshape),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       90 * time.Second,
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	go func() {
		<-ctx.Done()
		// Knative sends SIGTERM and stops routing; finish what is in flight.
		sctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	log.Printf("example-function listening on :%s (uppercase=%v)", port, upper)
	if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Fatalf("example-function: %v", err)
	}
}

// newHandler serves events on POST / and a probe on GET /healthz.
func newHandler(upper, reshape bool) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("POST /", func(w http.ResponseWriter, r *http.Request) {
		r.Body = http.MaxBytesReader(w, r.Body, maxBody)
		ev, err := cehttp.NewEventFromHTTPRequest(r)
		if err == nil {
			err = ev.Validate()
		}
		if err != nil {
			http.Error(w, "not a valid CloudEvent: "+err.Error(), http.StatusBadRequest)
			return
		}
		mark := func(in *event.Event) event.Event { return reply(in, upper) }
		if reshape {
			mark = reshaped
		}
		if err := cereply.Reference(w, r, ev, mark); err != nil {
			log.Printf("example-function: write reply to %s: %v", ev.ID(), err)
		}
	})
	return mux
}

// reply is the event the function answers with: a copy of in, marked.
func reply(in *event.Event, upper bool) event.Event {
	out := in.Clone()
	out.SetExtension("handledby", "example-function")
	if upper && len(out.DataEncoded) > 0 {
		out.DataEncoded = bytes.ToUpper(out.DataEncoded)
	}
	return out
}

// reshaped is the reply of RESHAPE=true: the payload's value and
// createdts, and the length of its padding, as a new JSON object of type
// "reshaped"; data that is not such an object is answered as it is.
func reshaped(in *event.Event) event.Event {
	out := in.Clone()
	out.SetExtension("handledby", "example-function")
	var p struct {
		Value     json.RawMessage `json:"value"`
		Createdts json.RawMessage `json:"createdts"`
		Padding   string          `json:"padding"`
	}
	if json.Unmarshal(in.Data(), &p) != nil {
		return out
	}
	out.SetType("reshaped")
	_ = out.SetData(event.ApplicationJSON, map[string]any{"value": p.Value, "createdts": p.Createdts, "size": len(p.Padding)})
	return out
}
