// Command example-udsink is a Numaflow user-defined sink written with the
// numaflow-go SDK, used by the tests and the deploy/ example. It appends one
// line per written message to EXAMPLE_OUT_FILE (standard output if unset),
// and the line is written before the sink answers SUCCESS or ON_SUCCESS:
//
//	<message id> TAB <n> TAB <value length> TAB <keys, comma-separated> TAB <event time, unix ms> TAB <ok|bad>
//
// where n is the number the value starts with (-1 if none; a leading
// "onsuccess:", as the ON_SUCCESS rule below makes, is skipped) and ok says
// the value is exactly what example-udsource makes for n. For a value
// starting with n, the first rule that matches decides:
//
//  1. n % EXAMPLE_FALLBACK_EVERY == 0 is answered FALLBACK (default 7; never
//     in fallback or onsuccess mode);
//  2. n % EXAMPLE_FAIL_EVERY == 5 is answered FAILURE the first time this
//     process sees its message id (default 13; 0 disables);
//  3. n % EXAMPLE_NACK_EVERY == 4 is answered NACK with a redelivery delay
//     of EXAMPLE_NACK_DELAY_MS milliseconds the first time this process sees
//     its message id (default 0: disabled; delay default 0), its reason
//     "example nack for <n> (first attempt)" and, when
//     EXAMPLE_NACK_MAX_DELIVERIES is set, that max_deliveries;
//  4. n % EXAMPLE_ONSUCCESS_EVERY == 3 is written, then answered ON_SUCCESS
//     with a replacement message whose value is "onsuccess:" followed by the
//     original value and whose keys are ["ons"] (default 0: disabled; never
//     in fallback or onsuccess mode, where Numaflow has no onSuccess sink to
//     forward to);
//  5. everything else is written and answered SUCCESS.
//
// The remainders differ (0, 5, 4, 3), so with one modulus for every rule no
// value matches two; with different moduli the order above holds. A message
// failed or nacked once is not failed or nacked again by the same rule, so
// every message is written in the end.
//
// EXAMPLE_SINK_MODE=fallback (or NUMAFLOW_UD_CONTAINER_TYPE=fb-udsink, as
// Numaflow sets it) serves the fallback sink socket fb-sink.sock instead of
// sink.sock; EXAMPLE_SINK_MODE=onsuccess (or
// NUMAFLOW_UD_CONTAINER_TYPE=ons-udsink) serves the onSuccess sink socket
// ons-sink.sock; all in MV_UDS_DIR. EXAMPLE_FSYNC=true syncs the file
// before answering. On SIGTERM it stops once the runner has closed its
// stream and logs "stopped: wrote N messages, B of them not what
// example-udsource makes" (a pod's count when its log has rotated).
//
// EXAMPLE_LINES=none writes no line per message (EXAMPLE_OUT_FILE must
// then be unset): the sink still checks and counts every value, logs
// "wrote N messages so far, B of them not what example-udsource makes"
// every 10 seconds while the count grows, and the exit line. A pod that
// writes a line per message at tens of thousands a second pays for them
// in the node's log pipeline (containerd) and the kubelet rotates them
// away within seconds; the deploy/ example sets it. Default: all.
//
// Two settings imitate how a user's sink may behave under concurrency:
// EXAMPLE_LOCK=true holds one mutex across every handler call, its
// `for d := range ch` loop included, as a sink that is not safe for
// concurrent calls does (numaflow-go starts a call as soon as a SinkFn
// stream opens, so a second stream then waits for the first to end).
// EXAMPLE_OVERLAP_FILE=path counts the handler calls running at the same
// time (a call blocked on that mutex counts) and rewrites the file with the
// highest count seen, as a decimal number and a newline, whenever it grows.
package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/numaproj/numaflow-go/pkg/sinker"

	"github.com/monovertex/monovertex/internal/examplesrv"
)

// onSuccessPrefix starts the value of the messages this sink hands to the
// onSuccess sink.
const onSuccessPrefix = "onsuccess:"

func main() {
	dir := examplesrv.Setup("example-udsink")
	mode, containerType := os.Getenv("EXAMPLE_SINK_MODE"), os.Getenv("NUMAFLOW_UD_CONTAINER_TYPE")
	fallback := mode == "fallback" || containerType == sinker.UDContainerFallbackSink
	onSuccess := mode == "onsuccess" || containerType == sinker.UDContainerOnSuccessSink
	if fallback && onSuccess {
		log.Fatalf("EXAMPLE_SINK_MODE=%q and NUMAFLOW_UD_CONTAINER_TYPE=%q ask for both the fallback and the onSuccess sink; set one", mode, containerType)
	}
	s := &sink{
		fallbackEvery:  examplesrv.Int("EXAMPLE_FALLBACK_EVERY", 7),
		failEvery:      examplesrv.Int("EXAMPLE_FAIL_EVERY", 13),
		nackEvery:      examplesrv.Int("EXAMPLE_NACK_EVERY", 0),
		nackDelayMS:    uint64(examplesrv.Int("EXAMPLE_NACK_DELAY_MS", 0)),
		nackMax:        uint32(examplesrv.Int("EXAMPLE_NACK_MAX_DELIVERIES", 0)),
		onSuccessEvery: examplesrv.Int("EXAMPLE_ONSUCCESS_EVERY", 0),
		fsync:          os.Getenv("EXAMPLE_FSYNC") == "true",
		lock:           os.Getenv("EXAMPLE_LOCK") == "true",
		overlapFile:    os.Getenv("EXAMPLE_OVERLAP_FILE"),
		failed:         map[string]bool{},
		nacked:         map[string]bool{},
		out:            os.Stdout,
	}
	switch lines := examplesrv.Env("EXAMPLE_LINES", "all"); {
	case lines == "none" && os.Getenv("EXAMPLE_OUT_FILE") != "":
		log.Fatalf("EXAMPLE_LINES=none writes no lines, and EXAMPLE_OUT_FILE=%q asks for them in a file; unset one", os.Getenv("EXAMPLE_OUT_FILE"))
	case lines == "none":
		s.out = nil
		go s.progress(10 * time.Second)
	case lines != "all":
		log.Fatalf("invalid EXAMPLE_LINES=%q: want all or none", lines)
	}
	if fallback || onSuccess {
		// Numaflow refuses FALLBACK from these sinks and has nowhere to
		// send their ON_SUCCESS.
		s.fallbackEvery, s.onSuccessEvery = 0, 0
	}
	if p := os.Getenv("EXAMPLE_OUT_FILE"); p != "" {
		f, err := os.OpenFile(p, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			log.Fatal(err)
		}
		s.out, s.file = f, f
	}
	sock, infoFile := "sink.sock", "sinker-server-info"
	switch {
	case fallback:
		sock, infoFile = "fb-sink.sock", "fb-sinker-server-info"
	case onSuccess:
		sock, infoFile = "ons-sink.sock", "ons-sinker-server-info"
	}
	sockPath := filepath.Join(dir, sock)
	examplesrv.Serve(sinker.NewServer(s,
		sinker.WithSockAddr(sockPath),
		sinker.WithServerInfoFilePath(filepath.Join(dir, infoFile)),
	).Start, "serving on %s", sockPath)
	s.mu.Lock()
	defer s.mu.Unlock()
	log.Printf("stopped: wrote %d messages, %d of them not what example-udsource makes", s.written, s.bad)
}

type sink struct {
	fallbackEvery, failEvery, nackEvery, onSuccessEvery int
	nackDelayMS                                         uint64
	nackMax                                             uint32 // EXAMPLE_NACK_MAX_DELIVERIES; 0: none
	fsync                                               bool
	lock                                                bool
	overlapFile                                         string

	handlerMu sync.Mutex // held across a whole handler call with EXAMPLE_LOCK

	overlapMu          sync.Mutex
	running, overlapMx int

	mu   sync.Mutex
	out  io.Writer // nil with EXAMPLE_LINES=none
	file *os.File
	// written and bad count the messages written (a line each unless
	// EXAMPLE_LINES=none), and those among them whose
	// value was not what the source made: the exit line reports them, so
	// a test can count a pod's output when its log has rotated.
	written, bad int64
	failed       map[string]bool // message ids failed once already
	nacked       map[string]bool // message ids nacked once already
}

// wellFormed reports whether v is what example-udsource makes for n: the
// digits, then nothing or ':' and 'x' padding.
func wellFormed(v []byte, n int) bool {
	digits := strconv.Itoa(n)
	if !bytes.HasPrefix(v, []byte(digits)) {
		return false
	}
	rest := v[len(digits):]
	if len(rest) == 0 {
		return true
	}
	if rest[0] != ':' {
		return false
	}
	for _, c := range rest[1:] {
		if c != 'x' {
			return false
		}
	}
	return true
}

func (s *sink) Sink(_ context.Context, ch <-chan sinker.Datum) sinker.Responses {
	s.enter()
	defer s.leave()
	if s.lock {
		s.handlerMu.Lock()
		defer s.handlerMu.Unlock()
	}
	res := sinker.ResponsesBuilder()
	var lines []byte
	var count, bad int64
	for d := range ch {
		v := d.Value()
		n, isNum := examplesrv.Number(bytes.TrimPrefix(v, []byte(onSuccessPrefix)))
		switch {
		case isNum && s.fallbackEvery > 0 && n%s.fallbackEvery == 0:
			res = res.Append(sinker.ResponseFallback(d.ID()))
			continue
		case isNum && s.failEvery > 0 && n%s.failEvery == 5 && firstSight(&s.mu, s.failed, d.ID()):
			res = res.Append(sinker.ResponseFailure(d.ID(), fmt.Sprintf("example failure for %d (first attempt)", n)))
			continue
		case isNum && s.nackEvery > 0 && n%s.nackEvery == 4 && firstSight(&s.mu, s.nacked, d.ID()):
			reason, delay := fmt.Sprintf("example nack for %d (first attempt)", n), s.nackDelayMS
			opts := &sinker.NackOptions{Reason: &reason, Delay: &delay}
			if s.nackMax > 0 {
				opts.MaxDeliveries = &s.nackMax
			}
			res = res.Append(sinker.ResponseNack(d.ID(), opts))
			continue
		}
		shown, ok := -1, "ok"
		if isNum {
			shown = n
			if !wellFormed(bytes.TrimPrefix(v, []byte(onSuccessPrefix)), n) {
				ok = "bad"
				bad++
			}
		}
		count++
		if s.out != nil {
			lines = fmt.Appendf(lines, "%s\t%d\t%d\t%s\t%d\t%s\n", d.ID(), shown, len(v), strings.Join(d.Keys(), ","), d.EventTime().UnixMilli(), ok)
		}
		if isNum && s.onSuccessEvery > 0 && n%s.onSuccessEvery == 3 {
			msg := sinker.NewMessage(append([]byte(onSuccessPrefix), v...)).WithKeys([]string{"ons"})
			res = res.Append(sinker.ResponseOnSuccess(d.ID(), msg))
			continue
		}
		res = res.Append(sinker.ResponseOK(d.ID()))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.out == nil {
		s.written += count
		s.bad += bad
		return res
	}
	if len(lines) > 0 {
		// The lines reach the file (the kernel) before any SUCCESS or
		// ON_SUCCESS is sent: a killed sink never answered for what it did
		// not write.
		if _, err := s.out.Write(lines); err != nil {
			return failAll(res, err)
		}
		if s.fsync && s.file != nil {
			if err := s.file.Sync(); err != nil {
				return failAll(res, err)
			}
		}
		s.written += count
		s.bad += bad
	}
	return res
}

// progress logs the running count every interval while it grows.
func (s *sink) progress(interval time.Duration) {
	var last int64
	for range time.Tick(interval) {
		s.mu.Lock()
		written, bad := s.written, s.bad
		s.mu.Unlock()
		if written != last {
			log.Printf("wrote %d messages so far, %d of them not what example-udsource makes", written, bad)
			last = written
		}
	}
}

// enter counts a handler call and records a new highest overlap.
func (s *sink) enter() {
	s.overlapMu.Lock()
	defer s.overlapMu.Unlock()
	s.running++
	if s.running <= s.overlapMx {
		return
	}
	s.overlapMx = s.running
	if s.overlapFile == "" {
		return
	}
	// Written whole to a temporary file and renamed, so a reader never sees
	// a half-written number.
	tmp := s.overlapFile + ".tmp"
	if err := os.WriteFile(tmp, []byte(strconv.Itoa(s.overlapMx)+"\n"), 0o644); err != nil {
		log.Printf("write EXAMPLE_OVERLAP_FILE: %v", err)
		return
	}
	if err := os.Rename(tmp, s.overlapFile); err != nil {
		log.Printf("write EXAMPLE_OVERLAP_FILE: %v", err)
	}
}

func (s *sink) leave() {
	s.overlapMu.Lock()
	defer s.overlapMu.Unlock()
	s.running--
}

// firstSight records id in seen and reports whether it was new.
func firstSight(mu *sync.Mutex, seen map[string]bool, id string) bool {
	mu.Lock()
	defer mu.Unlock()
	if seen[id] {
		return false
	}
	seen[id] = true
	return true
}

func failAll(res sinker.Responses, err error) sinker.Responses {
	out := sinker.ResponsesBuilder()
	for _, r := range res {
		if r.Success || r.OnSuccess {
			r = sinker.ResponseFailure(r.ID, "write output file: "+err.Error())
		}
		out = out.Append(r)
	}
	return out
}
