package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/monovertex/monovertex/adapters/transformer/cloudevents"
	"github.com/monovertex/monovertex/runner"
	"github.com/monovertex/monovertex/runner/conformance"
)

func newTransformer(t *testing.T, url string) runner.Transformer {
	t.Helper()
	tr, err := cloudevents.New(cloudevents.Config{URL: url, Mode: "binary", Concurrency: 8, Timeout: 10 * time.Second, MaxReply: 64 << 20}, "example", nil)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

// The runner's transformer, calling this function, passes the conformance
// suite: the function implements the reference behaviour.
func TestConformanceThroughTheRunnersTransformer(t *testing.T) {
	srv := httptest.NewServer(newHandler(false))
	defer srv.Close()
	conformance.RunTransformer(t, conformance.TransformerCase{
		New: func(t *testing.T) runner.Transformer { return newTransformer(t, srv.URL) },
	})
}

func TestRepliesAreMarkedAndOptionallyUpperCased(t *testing.T) {
	srv := httptest.NewServer(newHandler(true))
	defer srv.Close()
	tr := newTransformer(t, srv.URL)
	defer tr.Close(context.Background())
	res, err := tr.Transform(context.Background(), []*runner.Message{{ID: "a", Value: []byte("hello")}, {ID: "b", Value: []byte("fanout")}})
	if err != nil {
		t.Fatal(err)
	}
	if len(res[0].Outputs) != 1 || string(res[0].Outputs[0].Value) != "HELLO" || res[0].Outputs[0].Headers["handledby"] != "example-function" {
		t.Fatalf("echo: %+v", res[0])
	}
	if len(res[1].Outputs) != 3 || string(res[1].Outputs[2].Value) != "FANOUT" {
		t.Fatalf("fanout: %+v", res[1])
	}
}

func TestRejectsWhatIsNotAnEvent(t *testing.T) {
	srv := httptest.NewServer(newHandler(false))
	defer srv.Close()
	resp, err := http.Post(srv.URL, "text/plain", strings.NewReader("just text"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("plain POST: %d, want 400", resp.StatusCode)
	}
	resp, err = http.Get(srv.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("GET /: %d, want 405", resp.StatusCode)
	}
	resp, err = http.Get(srv.URL + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /healthz: %d", resp.StatusCode)
	}
}
