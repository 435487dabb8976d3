// Package goid tells tests which goroutine runs them, for tests that check
// work is spread over, or kept to, a number of goroutines. It is its own
// package, free of the runner's, so that the runner's internal tests can
// import it (internal/testutil imports the runner).
package goid

import (
	"bytes"
	"runtime"
	"strconv"
)

// ID is the calling goroutine's number, from its stack header.
func ID() uint64 {
	var buf [64]byte
	b := buf[:runtime.Stack(buf[:], false)]
	b = bytes.TrimPrefix(b, []byte("goroutine "))
	id, _ := strconv.ParseUint(string(b[:bytes.IndexByte(b, ' ')]), 10, 64)
	return id
}
