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
	srv := httptest.NewServer(newHandler(false, false))
	defer srv.Close()
	conformance.RunTransformer(t, conformance.TransformerCase{
		New: func(t *testing.T) runner.Transformer { return newTransformer(t, srv.URL) },
	})
}

func TestRepliesAreMarkedAndOptionallyUpperCased(t *testing.T) {
	srv := httptest.NewServer(newHandler(true, false))
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
	srv := httptest.NewServer(newHandler(false, false))
	defer srv.Close()
	for _, tc := range []struct {
		name, method, path, contentType, body string
		want                                  int
	}{
		{"plain POST", http.MethodPost, "", "text/plain", "just text", http.StatusBadRequest},
		{"GET /", http.MethodGet, "/", "", "", http.StatusMethodNotAllowed},
		{"GET /healthz", http.MethodGet, "/healthz", "", "", http.StatusOK},
	} {
		req, err := http.NewRequest(tc.method, srv.URL+tc.path, strings.NewReader(tc.body))
		if err != nil {
			t.Fatal(err)
		}
		if tc.contentType != "" {
			req.Header.Set("Content-Type", tc.contentType)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Fatalf("%s: %d, want %d", tc.name, resp.StatusCode, tc.want)
		}
	}
}

// TestReshapeAnswersTheGeneratorsPayloadReshaped: RESHAPE=true does in Go
// what the bench's JSONata expression does.
func TestReshapeAnswersTheGeneratorsPayloadReshaped(t *testing.T) {
	srv := httptest.NewServer(newHandler(false, true))
	defer srv.Close()
	tr := newTransformer(t, srv.URL)
	defer tr.Close(context.Background())
	res, err := tr.Transform(context.Background(), []*runner.Message{{ID: "a", Value: []byte(`{"value":7,"createdts":123,"padding":"xxxx"}`)}})
	if err != nil {
		t.Fatal(err)
	}
	if len(res[0].Outputs) != 1 || string(res[0].Outputs[0].Value) != `{"createdts":123,"size":4,"value":7}` || res[0].Outputs[0].Headers["ce-type"] != "reshaped" {
		t.Fatalf("reshape: %+v", res[0])
	}
}
