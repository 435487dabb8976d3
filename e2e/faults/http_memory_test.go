package faults_test

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/monovertex/monovertex/internal/natstest"
	"github.com/monovertex/monovertex/internal/procstat"
	"github.com/monovertex/monovertex/internal/testutil"
)

// snapshot returns the samples so far; sampling goes on.
func (s *rssSampler) snapshot() []int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]int64(nil), s.samples...)
}

// sinkIDs counts the ids in the log sink's output, one line per message.
func sinkIDs(t *testing.T, stdout string) map[string]int {
	t.Helper()
	ids := map[string]int{}
	for _, l := range strings.Split(stdout, "\n") {
		i := strings.Index(l, " id=")
		if i < 0 {
			continue
		}
		id, err := strconv.QuotedPrefix(l[i+len(" id="):])
		if err != nil {
			t.Fatalf("sink line without a quoted id: %q", l)
		}
		id, _ = strconv.Unquote(id)
		ids[id]++
	}
	return ids
}

// tally counts, of the ids prefix0..prefix<n-1>, those the sink never
// wrote and the extra copies of those it wrote more than once.
func tally(ids map[string]int, prefix string, n int) (lost, dups int) {
	for i := 0; i < n; i++ {
		switch c := ids[prefix+strconv.Itoa(i)]; {
		case c == 0:
			lost++
		case c > 1:
			dups += c - 1
		}
	}
	return lost, dups
}

// claimHuge opens a connection that announces a body of claim bytes and
// sends only the first byte of it, then idles.
func claimHuge(t *testing.T, addr, auth string, claim int) net.Conn {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	h := "POST / HTTP/1.1\r\nHost: x\r\nContent-Type: application/octet-stream\r\nContent-Length: " + strconv.Itoa(claim) + "\r\n"
	if auth != "" {
		h += "Authorization: " + auth + "\r\n"
	}
	if _, err := io.WriteString(conn, h+"\r\nx"); err != nil {
		t.Fatal(err)
	}
	return conn
}

// sendValid posts n messages with ids prefix-0..n-1 of size bytes each
// from workers goroutines, and returns how many were answered 200 and the
// other answers seen.
func sendValid(url, auth, prefix string, n, size, workers int) (int, []string) {
	var ok atomic.Int64
	var mu sync.Mutex
	var other []string
	c := &http.Client{Timeout: 30 * time.Second}
	next := make(chan int)
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(natstest.Value(i, size)))
				req.Header.Set("X-Numaflow-Id", prefix+strconv.Itoa(i))
				if auth != "" {
					req.Header.Set("Authorization", auth)
				}
				resp, err := c.Do(req)
				if err != nil {
					mu.Lock()
					other = append(other, err.Error())
					mu.Unlock()
					continue
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					ok.Add(1)
					continue
				}
				mu.Lock()
				other = append(other, resp.Status)
				mu.Unlock()
			}
		}()
	}
	for i := 0; i < n; i++ {
		next <- i
	}
	close(next)
	wg.Wait()
	return int(ok.Load()), other
}

// TestHTTPHostileLengthsKeepMemoryBounded: 30 connections each claim a
// 64 MiB body (the default MV_HTTP_MAX_BODY) and send one byte, then idle.
// The source sizes buffers by the bytes that arrived, so the runner's peak
// RSS stays within 100 MiB of its idle figure (it reached 3.2 GB before);
// with MV_HTTP_AUTH_TOKEN set, every one of them is answered 401 while its
// body is still unsent. Meanwhile small and 1 MiB requests are all answered
// 200 and written once each, and nothing of the hostile requests is
// written.
func TestHTTPHostileLengthsKeepMemoryBounded(t *testing.T) {
	const hostile, claim, bound = 30, 64 << 20, 100 << 20
	small, large := pick(300, 3000), pick(20, 100)
	for _, withToken := range []bool{false, true} {
		name := "no token"
		if withToken {
			name = "token"
		}
		t.Run(name, func(t *testing.T) {
			env := httpSourceEnv(map[string]string{"MV_HTTP_BODY_TIMEOUT": "60s"})
			delete(env, "MV_HTTP_MAX_BODY") // the default, 64 MiB: the claims are allowed
			auth := ""
			if withToken {
				auth = "Bearer " + token
			} else {
				delete(env, "MV_HTTP_AUTH_TOKEN")
			}
			p := startRunner(t, env)
			pid := p.Cmd.Process.Pid
			time.Sleep(500 * time.Millisecond)
			idle, err := procstat.RSS(pid)
			if err != nil {
				t.Fatal(err)
			}
			hwmIdle, _ := procstat.PeakRSS(pid)
			sampler := sampleRSS(pid, 5*time.Millisecond)
			addr := strings.TrimPrefix(p.PortURL, "http://")
			conns := make([]net.Conn, hostile)
			for i := range conns {
				conns[i] = claimHuge(t, addr, "", claim)
			}
			unauthorized := 0
			if withToken {
				for i, c := range conns {
					c.SetReadDeadline(time.Now().Add(10 * time.Second))
					line, err := bufio.NewReader(c).ReadString('\n')
					if err != nil || !strings.Contains(line, "401") {
						t.Fatalf("hostile connection %d without a token: %q %v, want 401 before its body", i, line, err)
					}
					unauthorized++
				}
			}
			time.Sleep(500 * time.Millisecond) // the runner has taken the first byte of each
			attacked := peak(sampler.snapshot())
			start := time.Now()
			okSmall, otherSmall := sendValid(p.PortURL+"/", auth, "small-", small, 64, 8)
			okLarge, otherLarge := sendValid(p.PortURL+"/", auth, "large-", large, 1<<20, 2)
			served := time.Since(start)
			// Without a token the hostile connections are still open and
			// unanswered: the runner waits for their bodies.
			stillOpen := 0
			if !withToken {
				for _, c := range conns {
					c.SetReadDeadline(time.Now().Add(10 * time.Millisecond))
					var b [1]byte
					if _, err := c.Read(b[:]); err != nil {
						var ne net.Error
						if errors.As(err, &ne) && ne.Timeout() {
							stillOpen++
						}
					}
				}
			}
			time.Sleep(200 * time.Millisecond)
			top := peak(sampler.finish())
			if hwm, err := procstat.PeakRSS(pid); err == nil && hwm > hwmIdle {
				top = max(top, hwm)
			}
			for _, c := range conns {
				c.Close()
			}
			if code, took := sigterm(t, p, 30*time.Second); code != 0 {
				t.Fatalf("runner exited %d after SIGTERM (%v)", code, took)
			}
			ids := sinkIDs(t, p.Stdout.String())
			lost, dups := tally(ids, "small-", small)
			lostLarge, dupsLarge := tally(ids, "large-", large)
			lost, dups = lost+lostLarge, dups+dupsLarge
			extra := len(ids) - (small + large - lost)
			t.Logf("%s: %d connections claiming 64 MiB with 1 byte sent (%d answered 401, %d still waiting for their body); %d/%d small and %d/%d 1 MiB requests answered 200 in %v (other answers: %v %v); RSS idle %s, peak %s with only the hostile connections open (+%s), peak %s with the valid traffic too (+%s; bound +%s); sink: %d lost, %d duplicates, %d foreign",
				name, hostile, unauthorized, stillOpen, okSmall, small, okLarge, large, served.Round(time.Millisecond), otherSmall, otherLarge,
				mib(idle), mib(attacked), mib(attacked-idle), mib(top), mib(top-idle), mib(bound), lost, dups, extra)
			if okSmall != small || okLarge != large {
				t.Fatalf("valid requests during the attack: %d/%d small, %d/%d large answered 200; others %v %v", okSmall, small, okLarge, large, otherSmall, otherLarge)
			}
			if !withToken && stillOpen != hostile {
				t.Fatalf("%d of %d hostile connections were answered or closed early; they should wait for their bodies", hostile-stillOpen, hostile)
			}
			if lost > 0 || extra != 0 {
				t.Fatalf("the sink lost %d valid messages and wrote %d it should not have", lost, extra)
			}
			if top-idle > bound {
				t.Fatalf("peak RSS %s is %s above idle %s; bound %s", mib(top), mib(top-idle), mib(idle), mib(bound))
			}
			noRaces(t, p)
			report(t, result{
				Scenario: fmt.Sprintf("HTTP source, %s: 30 connections claim Content-Length 64 MiB and send 1 byte, while valid requests flow", name),
				Messages: small + large, Lost: lost, Duplicated: strconv.Itoa(dups), Recovery: "-",
				Notes: fmt.Sprintf("RSS idle %s; +%s with the 30 open, peak %s (+%s; bound +100 MiB) with %d small + %d 1 MiB requests, all 200 in %s; %s",
					mib(idle), mib(attacked-idle), mib(top), mib(top-idle), small, large, round(served), map[bool]string{true: "all 30 hostile answered 401 before their body", false: "all 30 hostile still waiting, nothing of theirs written"}[withToken]),
			})
		})
	}
}

// TestHTTPInflightBudgetAnswers503ThenTakesTheRetries: two authenticated
// connections each send 1 MiB minus one byte of a 1 MiB body and stall,
// holding MV_HTTP_MAX_INFLIGHT_BYTES (2 MiB) between them. Requests that
// arrive meanwhile wait a second and get 503 with Retry-After: 1; callers
// that retry as told get 200 once the stalled bodies time out (408), and
// every message is written once.
func TestHTTPInflightBudgetAnswers503ThenTakesTheRetries(t *testing.T) {
	const n, size = 20, 100 << 10
	p := testutil.StartRunner(t, httpSourceEnv(map[string]string{
		"MV_HTTP_MAX_BODY":           strconv.Itoa(1 << 20),
		"MV_HTTP_MAX_INFLIGHT_BYTES": strconv.Itoa(2 << 20),
		"MV_HTTP_BODY_TIMEOUT":       "4s",
	}))
	p.WaitReady(60 * time.Second)
	addr := strings.TrimPrefix(p.PortURL, "http://")
	stalled := make([]net.Conn, 2)
	for i := range stalled {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprintf(c, "POST / HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nX-Numaflow-Id: stalled-%d\r\nContent-Length: %d\r\n\r\n", token, i, 1<<20)
		if _, err := c.Write(bytes.Repeat([]byte("s"), 1<<20-1)); err != nil {
			t.Fatal(err)
		}
		stalled[i] = c
	}
	time.Sleep(500 * time.Millisecond)
	start := time.Now()
	var mu sync.Mutex
	answers := map[string]int{}
	var badRetryAfter atomic.Int64
	var wg sync.WaitGroup
	c := &http.Client{Timeout: 30 * time.Second}
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for attempt := 0; attempt < 30; attempt++ {
				req, _ := http.NewRequest(http.MethodPost, p.PortURL+"/", bytes.NewReader(natstest.Value(i, size)))
				req.Header.Set("Authorization", "Bearer "+token)
				req.Header.Set("X-Numaflow-Id", "retried-"+strconv.Itoa(i))
				resp, err := c.Do(req)
				if err != nil {
					mu.Lock()
					answers["error"]++
					mu.Unlock()
					time.Sleep(time.Second)
					continue
				}
				resp.Body.Close()
				mu.Lock()
				answers[strconv.Itoa(resp.StatusCode)]++
				mu.Unlock()
				if resp.StatusCode == http.StatusOK {
					return
				}
				wait := time.Second
				if resp.StatusCode == http.StatusServiceUnavailable {
					s, err := strconv.Atoi(resp.Header.Get("Retry-After"))
					if err != nil || s < 1 {
						badRetryAfter.Add(1)
					} else {
						wait = time.Duration(s) * time.Second
					}
				}
				time.Sleep(wait)
			}
		}()
	}
	wg.Wait()
	took := time.Since(start)
	stalledAnswers := []string{}
	for _, c := range stalled {
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		line, err := bufio.NewReader(c).ReadString('\n')
		if err != nil {
			line = err.Error()
		}
		stalledAnswers = append(stalledAnswers, strings.TrimSpace(line))
	}
	if code, took := sigterm(t, p, 30*time.Second); code != 0 {
		t.Fatalf("runner exited %d after SIGTERM (%v)", code, took)
	}
	ids := sinkIDs(t, p.Stdout.String())
	lost, dups := tally(ids, "retried-", n)
	t.Logf("%d requests of 100 KiB against a 2 MiB budget held by two stalled 1 MiB bodies: answers %v in %v; stalled bodies answered %q; sink: %d lines, %d lost, %d duplicates",
		n, answers, took.Round(time.Millisecond), stalledAnswers, len(ids), lost, dups)
	if answers["503"] < n {
		t.Fatalf("%d answers 503 for %d requests that arrived with the budget spent; want each one refused first", answers["503"], n)
	}
	if badRetryAfter.Load() > 0 {
		t.Fatalf("%d answers 503 without a usable Retry-After", badRetryAfter.Load())
	}
	if answers["200"] != n || lost > 0 || len(ids) != n {
		t.Fatalf("after the budget freed: %d answered 200, %d lost, %d sink lines; want all %d written once", answers["200"], lost, len(ids), n)
	}
	for _, a := range stalledAnswers {
		if !strings.Contains(a, "408") {
			t.Fatalf("a stalled body was answered %q, want 408", a)
		}
	}
	noRaces(t, p)
	report(t, result{
		Scenario: "HTTP source, MV_HTTP_MAX_INFLIGHT_BYTES=2 MiB held by two stalled 1 MiB bodies; 20 callers retry on 503 as Retry-After says",
		Messages: n, Lost: lost, Duplicated: strconv.Itoa(dups), Recovery: round(took),
		Notes: fmt.Sprintf("%d answers 503 (Retry-After: 1), then all 200 once the stalled bodies got 408", answers["503"]),
	})
}
