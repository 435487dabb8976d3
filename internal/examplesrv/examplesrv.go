// Package examplesrv is what the Numaflow example containers
// (cmd/example-ud*) share: their environment settings, the socket
// directory, the leading number their rules are keyed by, and the start of
// an SDK server. They are test fixtures run as real processes, so a bad
// setting ends the process with a log line naming it.
package examplesrv

import (
	"context"
	"log"
	"os"
	"strconv"
)

// Setup prefixes the log with name and returns the socket directory
// MV_UDS_DIR (default /var/run/numaflow, as in a Numaflow pod), creating it.
func Setup(name string) string {
	log.SetPrefix(name + ": ")
	dir := Env("MV_UDS_DIR", "/var/run/numaflow")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		log.Fatal(err)
	}
	return dir
}

// Env returns the variable name, or def when it is unset or empty.
func Env(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// Int returns the variable name as a whole number, 0 or more, or def when
// it is unset or empty; anything else ends the process.
func Int(name string, def int) int {
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

// Number parses the leading decimal digits of v (at most 18, so it cannot
// overflow), as example-udsource writes them.
func Number(v []byte) (int, bool) {
	n, i := 0, 0
	for i < len(v) && v[i] >= '0' && v[i] <= '9' && i < 18 {
		n = n*10 + int(v[i]-'0')
		i++
	}
	return n, i > 0
}

// Deliver sends msg(id) on ch for each of ids in turn, as a source's Read
// hands the SDK what it read, and stops early when ctx ends.
func Deliver[T any](ctx context.Context, ch chan<- T, ids []int, msg func(id int) T) {
	for _, id := range ids {
		select {
		case ch <- msg(id):
		case <-ctx.Done():
			return
		}
	}
}

// Serve logs the line format makes (where the server listens, for the
// test's log) and runs start, an SDK server's Start, until it returns; an
// error ends the process.
func Serve(start func(context.Context) error, format string, args ...any) {
	log.Printf(format, args...)
	if err := start(context.Background()); err != nil {
		log.Fatal(err)
	}
}
