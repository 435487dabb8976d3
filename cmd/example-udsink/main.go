// Command example-udsink is a Numaflow user-defined sink written with the
// numaflow-go SDK, used by the tests and the deploy/ example. It appends one
// line per written message to EXAMPLE_OUT_FILE (standard output if unset),
// and the line is written before the sink answers SUCCESS:
//
//	<message id> TAB <n> TAB <value length> TAB <keys, comma-separated> TAB <event time, unix ms> TAB <ok|bad>
//
// where n is the number the value starts with (-1 if none) and ok says the
// value is exactly what example-udsource makes for n. For a value starting
// with n:
//
//   - n % EXAMPLE_FALLBACK_EVERY == 0 is answered FALLBACK (default 7; never
//     in fallback mode);
//   - n % EXAMPLE_FAIL_EVERY == 5 is answered FAILURE the first time this
//     process sees its message id (default 13; 0 disables);
//   - everything else is written and answered SUCCESS.
//
// EXAMPLE_SINK_MODE=fallback (or NUMAFLOW_UD_CONTAINER_TYPE=fb-udsink, as
// Numaflow sets it) serves the fallback sink socket fb-sink.sock instead of
// sink.sock, both in MV_UDS_DIR. EXAMPLE_FSYNC=true syncs the file before
// answering.
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

	"github.com/numaproj/numaflow-go/pkg/sinker"
)

func main() {
	log.SetPrefix("example-udsink: ")
	dir := env("MV_UDS_DIR", "/var/run/numaflow")
	fallback := os.Getenv("EXAMPLE_SINK_MODE") == "fallback" || os.Getenv("NUMAFLOW_UD_CONTAINER_TYPE") == sinker.UDContainerFallbackSink
	s := &sink{
		fallbackEvery: envInt("EXAMPLE_FALLBACK_EVERY", 7),
		failEvery:     envInt("EXAMPLE_FAIL_EVERY", 13),
		fsync:         os.Getenv("EXAMPLE_FSYNC") == "true",
		failed:        map[string]bool{},
		out:           os.Stdout,
	}
	if fallback {
		s.fallbackEvery = 0
	}
	if p := os.Getenv("EXAMPLE_OUT_FILE"); p != "" {
		f, err := os.OpenFile(p, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			log.Fatal(err)
		}
		s.out, s.file = f, f
	}
	sock, infoFile := "sink.sock", "sinker-server-info"
	if fallback {
		sock, infoFile = "fb-sink.sock", "fb-sinker-server-info"
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		log.Fatal(err)
	}
	log.Printf("serving on %s", filepath.Join(dir, sock))
	err := sinker.NewServer(s,
		sinker.WithSockAddr(filepath.Join(dir, sock)),
		sinker.WithServerInfoFilePath(filepath.Join(dir, infoFile)),
	).Start(context.Background())
	if err != nil {
		log.Fatal(err)
	}
}

func env(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func envInt(name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		log.Fatalf("invalid %s=%q: want a whole number, 0 or more", name, v)
	}
	return n
}

type sink struct {
	fallbackEvery, failEvery int
	fsync                    bool

	mu     sync.Mutex
	out    io.Writer
	file   *os.File
	failed map[string]bool // message ids failed once already
}

// number parses the leading decimal digits of v.
func number(v []byte) (int, bool) {
	n, i := 0, 0
	for i < len(v) && v[i] >= '0' && v[i] <= '9' && i < 18 {
		n = n*10 + int(v[i]-'0')
		i++
	}
	return n, i > 0
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
	res := sinker.ResponsesBuilder()
	var lines []byte
	for d := range ch {
		v := d.Value()
		n, isNum := number(v)
		if isNum && s.fallbackEvery > 0 && n%s.fallbackEvery == 0 {
			res = res.Append(sinker.ResponseFallback(d.ID()))
			continue
		}
		if isNum && s.failEvery > 0 && n%s.failEvery == 5 && s.firstSight(d.ID()) {
			res = res.Append(sinker.ResponseFailure(d.ID(), fmt.Sprintf("example failure for %d (first attempt)", n)))
			continue
		}
		shown, ok := -1, "ok"
		if isNum {
			shown = n
			if !wellFormed(v, n) {
				ok = "bad"
			}
		}
		lines = fmt.Appendf(lines, "%s\t%d\t%d\t%s\t%d\t%s\n", d.ID(), shown, len(v), strings.Join(d.Keys(), ","), d.EventTime().UnixMilli(), ok)
		res = res.Append(sinker.ResponseOK(d.ID()))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(lines) > 0 {
		// The lines reach the file (the kernel) before any SUCCESS is sent:
		// a killed sink never answered for what it did not write.
		if _, err := s.out.Write(lines); err != nil {
			return failAll(res, err)
		}
		if s.fsync && s.file != nil {
			if err := s.file.Sync(); err != nil {
				return failAll(res, err)
			}
		}
	}
	return res
}

func (s *sink) firstSight(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failed[id] {
		return false
	}
	s.failed[id] = true
	return true
}

func failAll(res sinker.Responses, err error) sinker.Responses {
	out := sinker.ResponsesBuilder()
	for _, r := range res {
		if r.Success {
			r = sinker.ResponseFailure(r.ID, "write output file: "+err.Error())
		}
		out = out.Append(r)
	}
	return out
}
