// Package adaptertest holds the test fixtures the message-broker adapters'
// tests share (JetStream and Kafka, source and sink): per-test stream and
// topic names, resources created once per conformance subtest, and the
// check every Validate table makes.
package adaptertest

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/monovertex/monovertex/runner"
)

// HashName is a name per (sub)test made only of letters and hex digits,
// for servers that refuse most punctuation in names (JetStream streams).
func HashName(t *testing.T) string {
	h := fnv.New64a()
	h.Write([]byte(t.Name()))
	return fmt.Sprintf("S%x", h.Sum64())
}

var nonName = regexp.MustCompile(`[^a-zA-Z0-9._-]+`)

// SafeName is the (sub)test's name with every character Kafka refuses in a
// topic or group name replaced, cut to Kafka's length limit; unlike
// HashName it stays readable in the broker's logs.
func SafeName(t *testing.T) string {
	n := nonName.ReplaceAllString(t.Name(), "_")
	if len(n) > 200 {
		n = n[len(n)-200:]
	}
	return n
}

// OncePerTest returns a function that names a resource per (sub)test with
// name and creates it with create the first time that test asks. The
// conformance suites call New and Produce or Received within one subtest:
// those must share one stream or topic, while every subtest gets a fresh
// one. It is safe for concurrent use.
func OncePerTest(name func(*testing.T) string, create func(t *testing.T, name string)) func(*testing.T) string {
	var mu sync.Mutex
	created := map[string]bool{}
	return func(t *testing.T) string {
		n := name(t)
		mu.Lock()
		defer mu.Unlock()
		if !created[n] {
			create(t, n)
			created[n] = true
		}
		return n
	}
}

// WantConfigError fails t unless err is what a Validate table row expects:
// nil when variable is empty, else a *runner.ConfigError naming variable.
// Either way an error must be one line, as the runner prints it as its
// only stderr line.
func WantConfigError(t testing.TB, err error, variable string) {
	t.Helper()
	var ce *runner.ConfigError
	switch {
	case variable == "" && err != nil:
		t.Fatalf("valid config refused: %v", err)
	case variable != "" && (!errors.As(err, &ce) || ce.Var != variable):
		t.Fatalf("got %v, want a ConfigError for %s", err, variable)
	case err != nil && strings.Contains(err.Error(), "\n"):
		t.Fatalf("error of more than one line: %q", err)
	}
}

// ValidateRow runs one row of a Validate table as the subtest name: change
// applied to a copy of good must make Validate(role) return what
// WantConfigError expects for variable.
func ValidateRow[C any, P interface {
	*C
	Validate(runner.Role) error
}](t *testing.T, name string, good C, role runner.Role, change func(*C), variable string) {
	t.Helper()
	t.Run(name, func(t *testing.T) {
		c := good
		change(&c)
		WantConfigError(t, P(&c).Validate(role), variable)
	})
}

// ReadN reads from src until n messages arrived, never asking for more
// than are still missing, and fails t if ctx ends first. A read error
// fails t too, unless retry is set: then it is logged and the read
// repeated (a Kafka source's reads fail while its group rebalances).
func ReadN(t testing.TB, ctx context.Context, src runner.Source, n int, retry bool) []*runner.Message {
	t.Helper()
	var got []*runner.Message
	for len(got) < n {
		if ctx.Err() != nil {
			t.Fatalf("read %d of %d messages before the deadline", len(got), n)
		}
		msgs, err := src.Read(ctx, n-len(got), 200*time.Millisecond)
		if err != nil {
			if !retry {
				t.Fatalf("read: %v", err)
			}
			t.Logf("read: %v", err)
		}
		got = append(got, msgs...)
	}
	return got
}
