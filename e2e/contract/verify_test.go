package contract_test

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/monovertex/monovertex/internal/testutil"
)

// figures are what one run measured, for the log.
type figures struct {
	lines, distinct, dups map[string]int
	overlap               map[string]int
	nacks, redeliveries   int
	delayNacks            int   // nacks with the sink's delay
	minWaitMS, maxWaitMS  int64 // nack to redelivery, for the delayed nacks
}

// verify waits until every id is acked and the source has nothing
// pending, then checks the run against the model. exact says no container
// was killed: then the files and the runner's totals must match the model
// line for line, and duplicates are allowed only for inputs that were
// nacked. After a kill, every output must be present at least once in the
// right file and nowhere else, and duplicates are counted.
func (p *pipeline) verify(timeout time.Duration, exact bool) figures {
	t := p.T
	t.Helper()
	total := p.s.total
	p.waitForAcked(total, timeout)
	testutil.WaitFor(t, 30*time.Second, "the runner to count every ack and the source's pending to reach 0", func() bool {
		p.alive()
		st, err := p.Runner.Status()
		return err == nil && st.Totals.Acked >= int64(total) && st.Pending == 0
	})
	p.checkNothingAckedEarly()
	fig := figures{lines: map[string]int{}, distinct: map[string]int{}, dups: map[string]int{}, overlap: map[string]int{}}

	// The nack log: every nack is followed by a redelivery, no sooner than
	// its delay.
	nacked := map[int]bool{}
	open := map[int]nackEvent{}
	fig.minWaitMS = -1
	for _, ev := range p.readNackLog() {
		if !ev.redeliver {
			if prev, ok := open[ev.id]; ok {
				t.Fatalf("id %d nacked at %d and again at %d without a redelivery between", ev.id, prev.ms, ev.ms)
			}
			open[ev.id] = ev
			nacked[ev.id] = true
			fig.nacks++
			continue
		}
		nk, ok := open[ev.id]
		if !ok {
			t.Fatalf("id %d redelivered at %d without a nack before", ev.id, ev.ms)
		}
		delete(open, ev.id)
		fig.redeliveries++
		wait := ev.ms - nk.ms
		if wait < nk.delay {
			t.Fatalf("id %d nacked at %d with a delay of %dms was redelivered %dms later", ev.id, nk.ms, nk.delay, wait)
		}
		if nk.delay > 0 {
			fig.delayNacks++
			if fig.minWaitMS < 0 || wait < fig.minWaitMS {
				fig.minWaitMS = wait
			}
			fig.maxWaitMS = max(fig.maxWaitMS, wait)
			if nk.delay != sNackDelayMS {
				t.Fatalf("id %d nacked with a delay of %dms; the sink asks for %dms", ev.id, nk.delay, sNackDelayMS)
			}
		}
	}
	for id, nk := range open {
		t.Fatalf("id %d nacked at %d (delay %dms) was never redelivered", id, nk.ms, nk.delay)
	}
	if fig.delayNacks == 0 || fig.nacks == fig.delayNacks {
		t.Fatalf("%d nacks, %d of them with the sink's delay: the run did not exercise both the transformer's and the sink's nacks", fig.nacks, fig.delayNacks)
	}

	// The output files against the model.
	for _, file := range outFiles {
		wantIDs := p.model.files[file]
		seen := map[string]int{}
		var dupIDs []string
		for _, l := range p.ReadSinkLines(file) {
			w, ok := wantIDs[l.ID]
			if !ok {
				t.Fatalf("%s has output %s (n=%d, keys %q), which the rules do not send there", file, l.ID, l.N, l.Keys)
			}
			if l.N != w.n || l.Size != w.size || l.Keys != w.keys || l.EventMS != w.eventMS || l.WellMade != w.ok {
				t.Fatalf("%s: output %s has n=%d size=%d keys=%q event=%d well-made=%v; want n=%d size=%d keys=%q event=%d well-made=%v",
					file, l.ID, l.N, l.Size, l.Keys, l.EventMS, l.WellMade, w.n, w.size, w.keys, w.eventMS, w.ok)
			}
			seen[l.ID]++
			if seen[l.ID] == 2 {
				dupIDs = append(dupIDs, fmt.Sprintf("%s(n=%d)", l.ID, l.N))
			}
			if seen[l.ID] > 1 {
				fig.dups[file]++
				if exact && !nacked[l.N] {
					t.Fatalf("%s holds output %s (n=%d) %d times, but its input was never nacked: a duplicate without a cause", file, l.ID, l.N, seen[l.ID])
				}
			}
			fig.lines[file]++
		}
		if len(seen) != len(wantIDs) {
			var missing []string
			for id, w := range wantIDs {
				if seen[id] == 0 {
					missing = append(missing, fmt.Sprintf("%s(n=%d)", id, w.n))
				}
			}
			sort.Strings(missing)
			t.Fatalf("%s has %d distinct outputs, the rules want %d; missing: %s", file, len(seen), len(wantIDs), firstN(missing, 10))
		}
		fig.distinct[file] = len(seen)
		if len(dupIDs) > 0 {
			sort.Strings(dupIDs)
			t.Logf("%s: %d duplicate lines, e.g. %s", file, fig.dups[file], firstN(dupIDs, 5))
		}
	}

	// One handler call at a time in each sink container.
	for _, file := range outFiles {
		fig.overlap[file] = p.overlap(file)
		if !p.s.unlocked && p.s.streams <= 1 && fig.overlap[file] != 1 {
			t.Errorf("the %s container saw at most %d overlapping handler calls, want exactly 1", file, fig.overlap[file])
		}
	}

	// The runner's totals against the files and the model.
	st := p.status().Totals
	m := p.model
	type check struct {
		what      string
		got, want int64
		atLeast   bool // after a kill, retries and a new container's rules add to the count
	}
	checks := []check{
		{"acked", st.Acked, int64(total), false},
		{"read (acked + nacked + dropped as in flight)", st.Read, st.Acked + st.Nacked + st.DuplicateDropped, false},
		// The example source hands an id out again only after its nack.
		{"duplicate_dropped", st.DuplicateDropped, 0, false},
		{"transformer_dropped", st.TransformerDropped, m.transformerDropped, false},
		{"udf_dropped", st.UDFDropped, m.udfDropped, false},
		{"bypass_dropped", st.BypassDropped, m.bypassDropped, false},
		{"dropped (transformer + udf + bypass + sink + in flight)", st.Dropped, st.TransformerDropped + st.UDFDropped + st.BypassDropped + st.SinkDropped + st.DuplicateDropped, false},
		{"sink_dropped", st.SinkDropped, 0, false},
		{"nacked (nack log)", st.Nacked, int64(fig.nacks), false},
		{"read (ids + redeliveries)", st.Read, int64(total + fig.redeliveries), false},
		{"nacked", st.Nacked, m.nackedInputs, !exact},
		{"sink_nacked", st.SinkNacked, m.sinkNacked, !exact},
		{"bypassed", st.Bypassed, m.bypassed, !exact},
		{"nacks with the sink's delay", int64(fig.delayNacks), m.sinkNackedInputs, !exact},
	}
	if exact {
		checks = append(checks,
			check{"written (sink lines)", st.Written, int64(fig.lines[fileSink]), false},
			check{"fallback_written (fallback lines)", st.FallbackWritten, int64(fig.lines[fileFallback]), false},
			check{"on_success_written (onSuccess lines)", st.OnSuccessWritten, int64(fig.lines[fileOnSuccess]), false},
		)
	} else {
		// A sink killed after writing a line but before answering leaves a
		// line the runner never counted; every counted write has its line.
		checks = append(checks,
			check{"sink lines", int64(fig.lines[fileSink]), st.Written, true},
			check{"written (distinct sink outputs)", st.Written, int64(fig.distinct[fileSink]), true},
			check{"fallback lines", int64(fig.lines[fileFallback]), st.FallbackWritten, true},
			check{"fallback_written (distinct)", st.FallbackWritten, int64(fig.distinct[fileFallback]), true},
			check{"onSuccess lines", int64(fig.lines[fileOnSuccess]), st.OnSuccessWritten, true},
			check{"on_success_written (distinct)", st.OnSuccessWritten, int64(fig.distinct[fileOnSuccess]), true},
		)
	}
	for _, c := range checks {
		if c.got != c.want && !(c.atLeast && c.got > c.want) {
			rel := "want"
			if c.atLeast {
				rel = "want at least"
			}
			t.Errorf("runner totals: %s = %d, %s %d", c.what, c.got, rel, c.want)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	t.Logf("%d ids: read %d acked %d nacked %d (sink_nacked outputs %d); written %d fallback %d onSuccess %d; dropped %d (transformer %d, udf %d, bypass %d); bypassed %d",
		total, st.Read, st.Acked, st.Nacked, st.SinkNacked, st.Written, st.FallbackWritten, st.OnSuccessWritten,
		st.Dropped, st.TransformerDropped, st.UDFDropped, st.BypassDropped, st.Bypassed)
	for _, f := range outFiles {
		t.Logf("%-14s %6d lines, %6d distinct outputs (the rules want %d), %d duplicate lines, at most %d overlapping handler calls",
			f, fig.lines[f], fig.distinct[f], len(m.files[f]), fig.dups[f], fig.overlap[f])
	}
	t.Logf("nack log: %d nacks (%d with the sink's %dms delay, redelivered %d..%dms later), %d redeliveries",
		fig.nacks, fig.delayNacks, sNackDelayMS, fig.minWaitMS, fig.maxWaitMS, fig.redeliveries)
	return fig
}

func firstN(s []string, n int) string {
	if len(s) > n {
		return strings.Join(s[:n], ", ") + fmt.Sprintf(" ... (%d in all)", len(s))
	}
	return strings.Join(s, ", ")
}
