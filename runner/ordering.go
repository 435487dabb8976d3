package runner

import (
	"context"
	"strings"
	"sync"
	"time"
)

// Ordering is which messages the engine keeps in read order on their way
// through the stages and the sinks (MV_ORDERING).
//
// Under OrderingPartition and OrderingKey the engine splits what it reads
// into lanes: a lane is a source partition (PartitionedSource; a source
// that names none has a single lane), or under OrderingKey a partition and
// a message's keys (the whole list; messages without keys share the lane
// of their partition's empty key). A lane has at most one message in
// flight: its next message starts only once the one before it reached a
// final state or was handed back, so no retry, fallback write or onSuccess
// write of a message can be overtaken by a later message of its lane, and
// every stage sees a lane's messages one at a time, in read order.
// Different lanes proceed at once: the heads of the lanes that are free
// go together as one batch through the ordinary batch path (process), up
// to MV_READ_BATCH_SIZE of them. A lane is free again as soon as its
// message is acked or handed back, which the batch does round by round,
// not when the whole batch ends: a message being retried holds only its
// own lane, and the lanes freed together (those written in one round) go
// on together as the next batch. No bound on batches is needed beyond
// one message per lane: the lanes hold only what was read, which the read
// loop bounds as in unordered mode (MV_INFLIGHT_BATCHES read batches, or
// MV_CONCURRENCY messages in streaming mode), and a read batch keeps its
// place there until the batches that carried its messages have ended.
// Acks come out of read order across lanes, which sources allow: the
// Kafka source commits only the acked prefix of each partition.
//
// A message handed back to the source (a nack, a stage's retries spent
// with retry, shutdown) leaves its lane: what follows it in the lane goes
// on, and its redelivery comes when the source brings it, so a nack gives
// up the order of that one message.
type Ordering string

// The MV_ORDERING choices.
const (
	// OrderingUnordered is the default: batches overlap freely.
	OrderingUnordered Ordering = "unordered"
	// OrderingPartition delivers each source partition one message at a
	// time, in read order (Knative's KafkaSource "ordered").
	OrderingPartition Ordering = "partition"
	// OrderingKey delivers each key of a partition one message at a time,
	// in read order, while other keys proceed in parallel.
	OrderingKey Ordering = "key"
)

// Valid reports whether o is one of the choices.
func (o Ordering) Valid() bool {
	return o == OrderingUnordered || o == OrderingPartition || o == OrderingKey
}

// laneKey names a lane: a partition key (partitionKey) and, under
// OrderingKey, the message's keys joined.
type laneKey struct {
	partition int32
	keys      string
}

// lane is the queue of one lane's messages read and not yet started.
type lane struct {
	key   laneKey
	queue []laneItem
	// busy: one of its messages is being processed.
	busy bool
}

// laneItem is a message waiting in a lane, with the read batch it came in.
type laneItem struct {
	m    *Message
	read *laneRead
	lane *lane
}

// laneRead is a read batch under ordering: done gives its read-loop slot
// and wait-group count back once all of its messages were processed.
type laneRead struct {
	left           int // guarded by lanes.mu
	start, readEnd time.Time
	done           func()
}

// lanes schedules the lanes' messages, at most one in flight per lane.
type lanes struct {
	e       *Engine
	ctx     context.Context // the work context
	onFatal func(error)
	// size is the most messages one batch takes.
	size int

	mu    sync.Mutex
	byKey map[laneKey]*lane
	ready []*lane // free lanes with messages queued, in the order they became so
	// busy maps each message started and not yet acked or handed back
	// to its lane.
	busy map[*Message]*lane
}

func newLanes(e *Engine, ctx context.Context, onFatal func(error)) *lanes {
	return &lanes{e: e, ctx: ctx, onFatal: onFatal, size: e.opts.BatchSize, byKey: map[laneKey]*lane{}, busy: map[*Message]*lane{}}
}

// keyOf is the lane of m.
func (l *lanes) keyOf(m *Message) laneKey {
	k := laneKey{partition: partitionKey(l.e.partitions, m)}
	if l.e.opts.Ordering == OrderingKey {
		switch len(m.Keys) {
		case 0:
		case 1:
			k.keys = m.Keys[0]
		default:
			// NUL cannot end a key that is followed by another, so joined
			// lists of different keys stay different.
			k.keys = strings.Join(m.Keys, "\x00")
		}
	}
	return k
}

// add queues a read batch in its lanes and starts what may start; done
// runs once every message of it was processed.
func (l *lanes) add(msgs []*Message, start, readEnd time.Time, done func()) {
	r := &laneRead{left: len(msgs), start: start, readEnd: readEnd, done: done}
	l.mu.Lock()
	for _, m := range msgs {
		k := l.keyOf(m)
		ln := l.byKey[k]
		if ln == nil {
			ln = &lane{key: k}
			l.byKey[k] = ln
		}
		ln.queue = append(ln.queue, laneItem{m: m, read: r, lane: ln})
		if !ln.busy && len(ln.queue) == 1 {
			l.ready = append(l.ready, ln)
		}
	}
	subs := l.takeLocked()
	l.mu.Unlock()
	l.start(subs)
}

// takeLocked takes the batches that may start now: the heads of the free
// lanes.
func (l *lanes) takeLocked() [][]laneItem {
	var subs [][]laneItem
	for len(l.ready) > 0 {
		n := min(l.size, len(l.ready))
		sub := make([]laneItem, 0, n)
		for _, ln := range l.ready[:n] {
			it := ln.queue[0]
			ln.queue[0] = laneItem{}
			ln.queue = ln.queue[1:]
			ln.busy = true
			l.busy[it.m] = ln
			sub = append(sub, it)
		}
		l.ready = append(l.ready[:0], l.ready[n:]...)
		subs = append(subs, sub)
	}
	return subs
}

// freeLocked frees the lane of a message that is done.
func (l *lanes) freeLocked(m *Message) {
	ln, ok := l.busy[m]
	if !ok {
		return
	}
	delete(l.busy, m)
	ln.busy = false
	if len(ln.queue) > 0 {
		l.ready = append(l.ready, ln)
	} else {
		delete(l.byKey, ln.key)
	}
}

// freeLanes frees the lanes of msgs, inputs a batch acked or handed back,
// and starts what that lets start; without ordering it does nothing.
func (e *Engine) freeLanes(msgs []*Message) {
	l := e.lanes
	if l == nil {
		return
	}
	l.mu.Lock()
	for _, m := range msgs {
		l.freeLocked(m)
	}
	subs := l.takeLocked()
	l.mu.Unlock()
	l.start(subs)
}

// start runs each batch on a goroutine of its own rather than on the
// read loop's batch workers, whose slots count read batches, which a lane
// batch is not; the stack growth the workers save (see readLoop) is small
// beside a lane batch's round trip.
func (l *lanes) start(subs [][]laneItem) {
	for _, sub := range subs {
		go l.run(sub)
	}
}

// run processes one batch of lane heads, then frees their lanes.
func (l *lanes) run(sub []laneItem) {
	// Deferred, so that a batch ended by runtime.Goexit still frees its
	// lanes and its read batches' places.
	defer l.finish(sub)
	msgs := make([]*Message, len(sub))
	for i, it := range sub {
		msgs[i] = it.m
	}
	if err := l.e.process(l.ctx, msgs, sub[0].read.start, sub[0].read.readEnd); err != nil && IsFatal(err) {
		l.onFatal(err)
	}
}

// finish, once a batch ended, frees the lanes it did not free as it went
// (none, unless the batch ended by runtime.Goexit), starts what that lets
// start, and hands back the places of the read batches it completed: only
// now, so that the read loop's wait group stays above zero while a batch
// runs, and what is still queued belongs to a read batch not yet done.
func (l *lanes) finish(sub []laneItem) {
	var dones []func()
	l.mu.Lock()
	for _, it := range sub {
		l.freeLocked(it.m)
		if it.read.left--; it.read.left == 0 {
			dones = append(dones, it.read.done)
		}
	}
	subs := l.takeLocked()
	l.mu.Unlock()
	l.start(subs)
	for _, d := range dones {
		d()
	}
}
