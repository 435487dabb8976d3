package faults_test

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/monovertex/monovertex/internal/procstat"
	"github.com/monovertex/monovertex/internal/testutil"
	"github.com/monovertex/monovertex/internal/testutil/hostilesink"
)

// TestHostileSinkContainerIsCutOff runs the runner (udwire, the default
// MV_UDF_TRANSPORT) against a sink container that breaks HTTP/2 on
// purpose (internal/testutil/hostilesink) once the runner's batch waits
// on its SinkFn stream: DATA past the window granted, an HPACK bomb, a
// message prefix claiming 64 MiB, DATA on a stream never opened. For each
// the runner's peak RSS stays within 64 MiB of its figure before the
// attack (and for the prefix its Go heap grows by less than half the size
// claimed: it grew by 78 MiB before), it ends the connection (with the GOAWAY code RFC 9113 gives,
// where it is the one to end it) and logs one line naming what broke;
// then the numaflow-go SDK sink takes the socket over and every message
// is written, and acked.
func TestHostileSinkContainerIsCutOff(t *testing.T) {
	const total = 2000
	const bound = 64 << 20
	for _, tc := range []struct {
		mode   hostilesink.Mode
		goAway http2.ErrCode
		drop   bool   // the container drops the connection itself: no GOAWAY
		log    string // what the runner's log line says
	}{
		{hostilesink.WindowOverrun, http2.ErrCodeFlowControl, false, "bytes left of its flow-control window"},
		{hostilesink.HPACKBomb, http2.ErrCodeProtocol, false, "exceeds 16777216 bytes (SETTINGS_MAX_HEADER_LIST_SIZE)"},
		{hostilesink.HugePrefix, 0, true, "udwire: reading from the container's socket: EOF"},
		{hostilesink.WrongStreams, http2.ErrCodeProtocol, false, "which this client never opened"},
	} {
		t.Run(string(tc.mode), func(t *testing.T) {
			p := newUDPipeline(t, total)
			srv, err := hostilesink.Start(p.Dir, tc.mode)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(srv.Stop)
			// Batches of 200 x 1 KiB: more than the 65,535 bytes of
			// stream window the container grants, so the batch waits in
			// Send and nothing reads the stream while it is attacked.
			p.source = p.StartSource(total, map[string]string{"EXAMPLE_MSG_SIZE": "1024"})
			p.startRunner()
			pid := p.runner.Cmd.Process.Pid
			select {
			case <-srv.Blocked():
			case <-time.After(60 * time.Second):
				t.Fatal("the runner's batch never filled the SinkFn stream's window")
			}
			time.Sleep(500 * time.Millisecond) // settle
			idle, err := procstat.RSS(pid)
			if err != nil {
				t.Fatal(err)
			}
			hwmIdle, _ := procstat.PeakRSS(pid)
			heapIdle := goMetric(p.runner, "go_memstats_heap_inuse_bytes")
			sampler := sampleRSS(pid, 5*time.Millisecond)
			// The Go heap too: a buffer allocated for a claimed size is
			// in use before a page of it is touched, which RSS misses.
			heapTop, heapDone := make(chan float64, 1), make(chan struct{})
			go func() {
				top := heapIdle
				for {
					top = max(top, goMetric(p.runner, "go_memstats_heap_inuse_bytes"))
					select {
					case <-heapDone:
						heapTop <- top
						return
					case <-time.After(100 * time.Millisecond): // each scrape makes garbage of its own
					}
				}
			}()
			attacked := time.Now()
			srv.Attack()
			var out hostilesink.Outcome
			select {
			case out = <-srv.Ended():
			case <-time.After(60 * time.Second):
				sampler.finish()
				t.Fatalf("the runner kept the hostile connection open for 60s; RSS now %d MiB", rssNow(pid)>>20)
			}
			cutOff := time.Since(attacked)
			close(heapDone)
			heapGrew := int64(<-heapTop - heapIdle)
			top := peak(sampler.finish())
			if hwm, err := procstat.PeakRSS(pid); err == nil && hwm > hwmIdle {
				top = max(top, hwm) // a peak between two samples
			}
			var line string
			testutil.WaitFor(t, 10*time.Second, "the runner's log line", func() bool {
				line = logLine(p.runner.Stderr.String(), tc.log)
				return line != ""
			})
			switch {
			case !tc.drop && (!out.GoAway || out.Code != tc.goAway):
				t.Errorf("the runner ended the connection with GOAWAY %v (sent: %v), want %v; reading ended with %v", out.Code, out.GoAway, tc.goAway, out.Err)
			case top-idle > bound:
				t.Errorf("peak RSS %s is %s above idle %s; bound %s", mib(top), mib(top-idle), mib(idle), mib(bound))
			case tc.mode == hostilesink.HugePrefix && heapGrew > hostilesink.Claimed/2:
				t.Errorf("the Go heap in use grew by %s for a prefix claiming %s with 1 KiB of it sent", mib(heapGrew), mib(hostilesink.Claimed))
			}
			t.Logf("%s: %s pushed; connection ended after %v (GOAWAY %v, %v); runner RSS idle %s, peak %s (+%s; bound +64 MiB), Go heap in use +%s at most; log: %s",
				tc.mode, mib(out.Pushed), cutOff.Round(time.Millisecond), out.GoAway, out.Code, mib(idle), mib(top), mib(top-idle), mib(heapGrew), line)

			// The SDK's sink replaces the hostile one on the same socket.
			srv.Stop()
			replaced := time.Now()
			p.startSink(0)
			p.waitAcked(total, 120*time.Second)
			recovered := time.Since(replaced)
			c := p.count(func(int) string { return "sink.out" }, "sink.out")
			acked := p.acked()
			if c.lost > 0 || len(acked) != total {
				t.Fatalf("after the SDK sink took over: %d of %d ids not written, %d acked", c.lost, total, len(acked))
			}
			noRaces(t, p.runner)
			report(t, result{
				Scenario: "hostile sink container (udwire): " + string(tc.mode) + ", then the SDK sink on the same socket",
				Messages: total, Lost: c.lost, Duplicated: strconv.Itoa(c.dupLines), Recovery: recovered.Round(time.Millisecond).String() + " to all acked",
				Notes: fmt.Sprintf("connection ended after %v (GOAWAY %v); RSS idle %s, peak %s (+%s; bound +64 MiB); Go heap +%s",
					cutOff.Round(time.Millisecond), goAwayName(out), mib(idle), mib(top), mib(top-idle), mib(heapGrew)),
			})
		})
	}
}

// logLine is the first line of the runner's log that contains want.
func logLine(log, want string) string {
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, want) {
			return l
		}
	}
	return ""
}

func rssNow(pid int) int64 {
	v, _ := procstat.RSS(pid)
	return v
}

// goAwayName is the GOAWAY code the runner sent, or what ended the
// connection without one.
func goAwayName(o hostilesink.Outcome) string {
	if o.GoAway {
		return o.Code.String()
	}
	return "none: the container dropped it"
}
