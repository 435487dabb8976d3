package kafka

import "sort"

// entryState is where one record read from a partition stands.
type entryState uint8

const (
	stateInflight entryState = iota // handed to the engine, not yet acked or nacked
	stateAcked                      // final: written, fallback-written or dropped on purpose
	stateNacked                     // handed back; read again after the seek
)

type entry struct {
	off   int64
	epoch int32
	st    entryState
}

// partTracker follows the records of one partition read since this
// replica was assigned it, and from them the offset that may be committed:
// the end of the longest prefix of acked records, as Knative's Kafka
// dispatcher commits. Acks above a gap are held until it fills. Offsets
// need not be contiguous (compaction, transaction markers): the prefix is
// over the records actually read.
type partTracker struct {
	entries []entry // ascending offsets; entries[head:] are not yet final
	head    int
	// next is one past the highest offset read; a record below it was read
	// before (a redelivery after a seek, or a stale buffered fetch).
	next int64
	// final is the offset to commit: every record below it is final. -1
	// while nothing was acked since the assignment.
	final      int64
	finalEpoch int32
	// committed is the last offset sent in a commit, -1 for none.
	committed int64
	inflight  int
	nacked    int
}

func newPartTracker() *partTracker {
	return &partTracker{next: -1, final: -1, committed: -1}
}

// read registers a fetched record and reports whether to hand it to the
// engine: new records and records that were nacked are; records in flight,
// acked, or already final are not, so a seek back redelivers only what was
// handed back.
func (t *partTracker) read(off int64, epoch int32) bool {
	if off >= t.next {
		t.entries = append(t.entries, entry{off: off, epoch: epoch, st: stateInflight})
		t.next = off + 1
		t.inflight++
		return true
	}
	return t.move(off, stateNacked, stateInflight)
}

// move changes a held record from state from to state to, keeping the
// counts of records in flight and nacked; it reports false for an offset
// it does not hold in state from.
func (t *partTracker) move(off int64, from, to entryState) bool {
	i, ok := t.find(off)
	if !ok || t.entries[i].st != from {
		return false
	}
	t.add(from, -1)
	t.add(to, 1)
	t.entries[i].st = to
	return true
}

// add changes the count of records in state st by d; acked records are
// not counted.
func (t *partTracker) add(st entryState, d int) {
	switch st {
	case stateInflight:
		t.inflight += d
	case stateNacked:
		t.nacked += d
	}
}

func (t *partTracker) find(off int64) (int, bool) {
	live := t.entries[t.head:]
	i := sort.Search(len(live), func(i int) bool { return live[i].off >= off })
	if i < len(live) && live[i].off == off {
		return t.head + i, true
	}
	return 0, false
}

// ack marks a record final and advances the commit point over the acked
// prefix. It reports false for an offset it does not hold.
func (t *partTracker) ack(off int64) bool {
	i, ok := t.find(off)
	if !ok {
		return false
	}
	if t.entries[i].st == stateAcked {
		return true
	}
	t.add(t.entries[i].st, -1)
	t.entries[i].st = stateAcked
	for t.head < len(t.entries) && t.entries[t.head].st == stateAcked {
		t.final, t.finalEpoch = t.entries[t.head].off+1, t.entries[t.head].epoch
		t.head++
	}
	if t.head == len(t.entries) {
		t.entries, t.head = t.entries[:0], 0
	} else if t.head > 1024 && t.head > len(t.entries)/2 {
		n := copy(t.entries, t.entries[t.head:])
		t.entries, t.head = t.entries[:n], 0
	}
	return true
}

// nack hands a record in flight back; it reports whether it did, and the
// partition must then be read again from that offset.
func (t *partTracker) nack(off int64) bool {
	return t.move(off, stateInflight, stateNacked)
}

// held counts the records tracked: in flight, nacked, or acked above a
// gap and so not yet committable.
func (t *partTracker) held() int { return len(t.entries) - t.head }

// toCommit returns the commit point if it moved since the last commit.
func (t *partTracker) toCommit() (int64, int32, bool) {
	if t.final < 0 || t.final <= t.committed {
		return 0, 0, false
	}
	return t.final, t.finalEpoch, true
}
