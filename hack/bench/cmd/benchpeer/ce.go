package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	"github.com/cloudevents/sdk-go/v2/protocol"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
)

// runFunction serves an sdk-go CloudEvents function on 127.0.0.1: it
// answers each event with the same event, the cheapest transformation that
// still carries the payload both ways.
func runFunction(ctx context.Context, args []string) error {
	ln, err := listenFlag("function", "127.0.0.1:8081", args)
	if err != nil {
		return err
	}
	p, err := cehttp.New(cehttp.WithListener(ln))
	if err != nil {
		return fmt.Errorf("CloudEvents HTTP protocol: %w", err)
	}
	c, err := cloudevents.NewClient(p)
	if err != nil {
		return fmt.Errorf("CloudEvents client: %w", err)
	}
	return c.StartReceiver(ctx, func(_ context.Context, e cloudevents.Event) (*cloudevents.Event, protocol.Result) {
		return &e, nil
	})
}

// runCEBaseline posts events to a function with the sdk-go client from a
// fixed number of goroutines, each waiting for its answer before the next
// post: the most a CloudEvents client can get from that function at that
// concurrency.
func runCEBaseline(ctx context.Context, args []string) error {
	fs, win := measureFlags("ce-baseline")
	target := fs.String("url", "", "function URL")
	size := fs.Int("size", 1024, "payload bytes of every event")
	conc := fs.Int("concurrency", 16, "requests in flight")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *target == "" || *conc <= 0 {
		return fmt.Errorf("-url and a positive -concurrency are required")
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns = *conc * 2
	tr.MaxIdleConnsPerHost = *conc * 2
	p, err := cehttp.New(cehttp.WithTarget(*target), cehttp.WithRoundTripper(tr))
	if err != nil {
		return fmt.Errorf("CloudEvents HTTP protocol: %w", err)
	}
	c, err := cloudevents.NewClient(p)
	if err != nil {
		return fmt.Errorf("CloudEvents client: %w", err)
	}
	payload := bytes.Repeat([]byte{'x'}, *size)
	var done, doneBytes, failed atomic.Int64
	var firstErr atomic.Value
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	var seq atomic.Int64
	for range *conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				e := cloudevents.NewEvent()
				e.SetID(strconv.FormatInt(seq.Add(1), 10))
				e.SetSource("/monovertex/bench")
				e.SetType("dev.monovertex.bench")
				if err := e.SetData("application/octet-stream", payload); err != nil {
					firstErr.CompareAndSwap(nil, err)
					failed.Add(1)
					continue
				}
				resp, res := c.Request(ctx, e)
				switch {
				case ctx.Err() != nil:
					return
				case !protocol.IsACK(res) || resp == nil || len(resp.Data()) != len(payload):
					if res == nil {
						res = errors.New("no event in the answer")
					}
					firstErr.CompareAndSwap(nil, res)
					failed.Add(1)
				default:
					done.Add(1)
					doneBytes.Add(int64(len(payload)))
				}
			}
		}()
	}
	r, err := win.measure(ctx, func() (int64, int64) { return done.Load(), doneBytes.Load() })
	cancel()
	wg.Wait()
	if err != nil {
		return err
	}
	r.Errors = failed.Load()
	if r.Msgs == 0 && r.Errors > 0 {
		return fmt.Errorf("every request failed; first error: %v", firstErr.Load())
	}
	return printResult(r)
}
