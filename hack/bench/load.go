package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/monovertex/monovertex/hack/bench/internal/wait"
)

// loadResult is what the HTTP load client measured in its window.
type loadResult struct {
	rate     float64 // answered requests per second
	p50, p99 float64 // ms
	errors   int64
	answered int // requests answered in the window
}

// load posts size-byte binary-mode CloudEvents to url from conc goroutines,
// each waiting for its answer before the next post, for the warm-up and the
// measured window. Requests answered inside the window count; their
// latencies give p50 and p99. onStart and onEnd, when set, run at the
// window's edges (to snapshot the runner).
func (h *harness) load(ctx context.Context, url string, size, conc int, onStart, onEnd func()) (loadResult, error) {
	res := loadResult{rate: math.NaN(), p50: math.NaN(), p99: math.NaN()}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns = conc * 2
	tr.MaxIdleConnsPerHost = conc * 2
	tr.DisableCompression = true
	client := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	defer tr.CloseIdleConnections()
	payload := bytes.Repeat([]byte{'x'}, size)

	const (
		warming = iota
		measuring
		finished
	)
	var phase atomic.Int32
	var seq, failed atomic.Int64
	var firstErr atomic.Value
	lat := make([][]float64, conc)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	for w := range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for wctx.Err() == nil {
				start := time.Now()
				err := post(wctx, client, url, payload, strconv.FormatInt(seq.Add(1), 10))
				took := time.Since(start)
				if phase.Load() != measuring {
					continue
				}
				if err != nil {
					if wctx.Err() == nil {
						failed.Add(1)
						firstErr.CompareAndSwap(nil, err)
					}
					continue
				}
				lat[w] = append(lat[w], float64(took.Microseconds())/1000)
			}
		}()
	}
	if !wait.Sleep(ctx, h.warmup) {
		return res, ctx.Err()
	}
	if onStart != nil {
		onStart()
	}
	phase.Store(measuring)
	t0 := time.Now()
	wait.Sleep(ctx, h.duration)
	phase.Store(finished)
	elapsed := time.Since(t0)
	if onEnd != nil {
		onEnd()
	}
	cancel()
	wg.Wait()
	if ctx.Err() != nil {
		return res, ctx.Err()
	}
	var all []float64
	for _, l := range lat {
		all = append(all, l...)
	}
	res.errors = failed.Load()
	if len(all) == 0 {
		return res, fmt.Errorf("no request to %s succeeded in the window (%d failed; first error: %v)", url, res.errors, firstErr.Load())
	}
	res.answered = len(all)
	res.rate = float64(len(all)) / elapsed.Seconds()
	res.p50 = percentile(all, 0.5)
	res.p99 = percentileSorted(all, 0.99)
	if res.errors > 0 {
		return res, fmt.Errorf("%d of %d requests to %s failed in the window; first error: %v", res.errors, res.errors+int64(len(all)), url, firstErr.Load())
	}
	return res, nil
}

// post sends one binary-mode CloudEvent and reads the whole answer.
func post(ctx context.Context, c *http.Client, url string, payload []byte, id string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(payload))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/octet-stream")
	req.Header.Set("Ce-Specversion", "1.0")
	req.Header.Set("Ce-Id", id)
	req.Header.Set("Ce-Source", "/monovertex/bench")
	req.Header.Set("Ce-Type", "dev.monovertex.bench")
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%s: %s", resp.Status, bytes.TrimSpace(body))
	}
	return nil
}
