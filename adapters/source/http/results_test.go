package http

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/monovertex/monovertex/runner"
)

// TestResultModeAnswersABatchRequestInRequestOrder: a batch request is
// answered with every written output of its events, in request order,
// as a CloudEvents batch; a request whose every output was dropped gets
// 204; an empty batch too.
func TestResultModeAnswersABatchRequestInRequestOrder(t *testing.T) {
	cfg := testConfig()
	cfg.Response = ResponseResult
	cfg.Type = "t.default"
	src, url := start(t, cfg)
	if !src.TakesResults() {
		t.Fatal("TakesResults is false in result mode")
	}
	batch := `[{"specversion":"1.0","id":"a","source":"/s","type":"t"},{"specversion":"1.0","id":"b","source":"/s","type":"t"}]`
	answer := make(chan *http.Response, 1)
	go func() {
		resp, err := http.Post(url, "application/cloudevents-batch+json", strings.NewReader(batch))
		if err != nil {
			t.Error(err)
		}
		answer <- resp
	}()
	msgs := readN(t, src, 2)
	out := func(id, v string) *runner.Message {
		return &runner.Message{ID: id, Value: []byte(v), Headers: map[string]string{"content-type": "text/plain"}}
	}
	// b's outputs are written first: the answer keeps the request's order.
	src.Results(msgs[1:], [][]*runner.Message{{out("b-0", "B0"), out("b-1", "B1")}})
	src.Results(msgs[:1], [][]*runner.Message{{out("a", "A")}})
	if err := src.Ack(context.Background(), msgs); err != nil {
		t.Fatal(err)
	}
	resp := <-answer
	if resp == nil {
		t.FailNow()
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var evs []struct {
		ID, Type, Data string
		DataBase64     string `json:"data_base64"`
	}
	if err := json.Unmarshal(body, &evs); err != nil || resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/cloudevents-batch+json" {
		t.Fatalf("answer %s %s %s (%v), want 200 and a batch", resp.Status, resp.Header.Get("Content-Type"), body, err)
	}
	var got []string
	for _, ev := range evs {
		got = append(got, ev.ID+"="+ev.Data+ev.DataBase64+"/"+ev.Type)
	}
	if strings.Join(got, " ") != "a=QQ==/t.default b-0=QjA=/t.default b-1=QjE=/t.default" {
		t.Fatalf("batch %v", got)
	}

	for _, body := range []string{`[{"specversion":"1.0","id":"c","source":"/s","type":"t"}]`, `[]`} {
		ch := make(chan int, 1)
		go func() {
			resp, err := http.Post(url, "application/cloudevents-batch+json", strings.NewReader(body))
			if err != nil {
				t.Error(err)
				ch <- 0
				return
			}
			resp.Body.Close()
			ch <- resp.StatusCode
		}()
		if body != `[]` {
			msgs := readN(t, src, 1)
			src.Results(msgs, [][]*runner.Message{nil})
			if err := src.Ack(context.Background(), msgs); err != nil {
				t.Fatal(err)
			}
		}
		if status := <-ch; status != http.StatusNoContent {
			t.Fatalf("%s: answered %d, want 204", body, status)
		}
	}
	if n := src.ResultsLost(); n != 0 {
		t.Fatalf("%d results lost, want 0", n)
	}
}
