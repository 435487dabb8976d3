// Command example-udtransformer is a Numaflow source transformer written
// with the numaflow-go SDK, used by the tests and the deploy/ example. For a
// value starting with a number n (as example-udsource makes them):
//
//   - n % EXAMPLE_DROP_EVERY == 0 is dropped (default 10);
//   - n % EXAMPLE_FANOUT_EVERY == 1 becomes EXAMPLE_FANOUT copies (defaults 10 and 3),
//     keyed "fan0", "fan1", ...;
//   - n % EXAMPLE_NACK_EVERY == 2 is nacked the first time this process
//     sees it, with a redelivery delay of EXAMPLE_NACK_DELAY_MS
//     milliseconds (default 0: none), and passed the next time (default 0:
//     never);
//   - anything else passes unchanged, keyed "even" or "odd".
//
// Every output keeps the input's value and has the input's event time plus
// one hour, so a test can tell the transformer's keys and event times from
// the source's. Values without a number follow the conformance suite's
// reference behaviour: "drop" is dropped, "fanout" becomes three copies,
// anything else passes. The socket is sourcetransform.sock in MV_UDS_DIR.
//
// EXAMPLE_PANIC_AT=k (default 0: never) makes the handler panic on the
// k-th message this process transforms, as a user's bug would: the SDK
// answers the stream with its UDF_EXECUTION_ERROR status carrying the
// stack, and stops the server, so the process exits non-zero.
package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/numaproj/numaflow-go/pkg/sourcetransformer"

	"github.com/monovertex/monovertex/internal/examplesrv"
)

func main() {
	dir := examplesrv.Setup("example-udtransformer")
	t := &transformer{
		dropEvery:   examplesrv.Int("EXAMPLE_DROP_EVERY", 10),
		fanoutEvery: examplesrv.Int("EXAMPLE_FANOUT_EVERY", 10),
		fanout:      examplesrv.Int("EXAMPLE_FANOUT", 3),
		nackEvery:   examplesrv.Int("EXAMPLE_NACK_EVERY", 0),
		nackDelayMS: uint64(examplesrv.Int("EXAMPLE_NACK_DELAY_MS", 0)),
		panicAt:     int64(examplesrv.Int("EXAMPLE_PANIC_AT", 0)),
		seen:        map[int]bool{},
	}
	sock := filepath.Join(dir, "sourcetransform.sock")
	examplesrv.Serve(sourcetransformer.NewServer(t,
		sourcetransformer.WithSockAddr(sock),
		sourcetransformer.WithServerInfoFilePath(filepath.Join(dir, "sourcetransformer-server-info")),
	).Start, "serving on %s", sock)
}

type transformer struct {
	dropEvery, fanoutEvery, fanout, nackEvery int
	nackDelayMS                               uint64
	panicAt                                   int64
	handled                                   atomic.Int64

	mu   sync.Mutex
	seen map[int]bool // numbers nacked once already
}

func (t *transformer) Transform(_ context.Context, keys []string, d sourcetransformer.Datum) sourcetransformer.Messages {
	if k := t.handled.Add(1); t.panicAt > 0 && k == t.panicAt {
		panic(fmt.Sprintf("example-udtransformer: EXAMPLE_PANIC_AT=%d reached", t.panicAt))
	}
	out := sourcetransformer.MessagesBuilder()
	v := d.Value()
	n, ok := examplesrv.Number(v)
	if !ok {
		msg := sourcetransformer.NewMessage(v, d.EventTime()).WithKeys(keys)
		switch string(v) {
		case "drop":
			return out.Append(sourcetransformer.MessageToDrop(d.EventTime()))
		case "fanout":
			return out.Append(msg).Append(msg).Append(msg)
		}
		return out.Append(msg)
	}
	et := d.EventTime().Add(time.Hour)
	switch {
	case t.dropEvery > 0 && n%t.dropEvery == 0:
		return out.Append(sourcetransformer.MessageToDrop(et))
	case t.nackEvery > 0 && n%t.nackEvery == 2 && t.firstSight(n):
		var opts *sourcetransformer.NackOptions
		if t.nackDelayMS > 0 {
			opts = &sourcetransformer.NackOptions{Delay: &t.nackDelayMS}
		}
		return out.Append(sourcetransformer.MessageToNack(et, opts))
	case t.fanoutEvery > 0 && n%t.fanoutEvery == 1:
		for k := 0; k < t.fanout; k++ {
			out = out.Append(sourcetransformer.NewMessage(v, et).WithKeys([]string{"fan" + strconv.Itoa(k)}))
		}
		return out
	}
	parity := "even"
	if n%2 == 1 {
		parity = "odd"
	}
	return out.Append(sourcetransformer.NewMessage(v, et).WithKeys([]string{parity}))
}

func (t *transformer) firstSight(n int) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.seen[n] {
		return false
	}
	t.seen[n] = true
	return true
}
