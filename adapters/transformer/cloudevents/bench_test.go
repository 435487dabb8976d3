package cloudevents

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/monovertex/monovertex/runner"
)

// BenchmarkTransform1KiB transforms batches of 16 1 KiB messages through a
// function on loopback that answers every call with the same binary-mode
// event, so what changes between runs is the transformer's own work: the
// mapping, the request, the answer's reading and decoding. allocs/msg
// counts the whole process, the server's share included (the same in
// every run).
func BenchmarkTransform1KiB(b *testing.B) {
	reply := make([]byte, 1024)
	for i := range reply {
		reply[i] = 'a' + byte(i%26)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		h := w.Header()
		h["Ce-Specversion"] = []string{"1.0"}
		h["Ce-Id"] = []string{r.Header.Get("Ce-Id")}
		h["Ce-Source"] = []string{"/bench"}
		h["Ce-Type"] = []string{"bench.reply"}
		h["Content-Type"] = []string{"application/octet-stream"}
		h["Content-Length"] = []string{strconv.Itoa(len(reply))}
		_, _ = w.Write(reply)
	}))
	defer srv.Close()
	cfg := Config{URL: srv.URL, Mode: "binary", Concurrency: 4, Timeout: 10 * time.Second, MaxReply: 64 << 20}
	tr, err := New(cfg, "bench", nil)
	if err != nil {
		b.Fatal(err)
	}
	defer tr.Close(context.Background())
	const batch = 16
	payload := make([]byte, 1024)
	msgs := make([]*runner.Message, batch)
	for i := range msgs {
		msgs[i] = &runner.Message{ID: fmt.Sprintf("m-%d", i), Value: payload, Keys: []string{"k"}, EventTime: time.Unix(1700000000, 0)}
	}
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		res, err := tr.Transform(ctx, msgs)
		if err != nil {
			b.Fatal(err)
		}
		for i := range res {
			if res[i].Err != nil || len(res[i].Outputs) != 1 || len(res[i].Outputs[0].Value) != len(reply) {
				b.Fatalf("message %d: %+v", i, res[i])
			}
			if release := res[i].Outputs[0].Release; release != nil {
				release()
			}
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batch), "ns/msg")
}
