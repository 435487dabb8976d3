package runner

import (
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// failureLogPeriod is the longest a failure of one kind waits to be logged
// again: the first of a kind is logged at once, the ones after it within
// the period are counted into one line.
const failureLogPeriod = 5 * time.Second

// maxFailureKinds bounds the kinds a failure log tracks at once, as
// containerErrorCapacity bounds the /status ring: errors that name their
// message (an ID, an offset) would otherwise each be a kind of their own.
// The kinds past it are counted together under otherFailures.
const maxFailureKinds = 64

// otherFailures is the error text of the kind that counts the failures
// past maxFailureKinds.
const otherFailures = "(other errors, past the number of kinds logged apart)"

// failureLog puts per-message failures (a write or a call that failed, a
// message dropped or sent to the fallback sink) in the log, which otherwise
// only the metrics and /status would see, without a line per message. Like
// the /status ring it groups failures by what happened and the error's
// text, and counts them; a line carries "count", the failures of its kind
// since the kind's last line.
type failureLog struct {
	log    *zap.SugaredLogger
	period time.Duration
	now    func() time.Time

	mu    sync.Mutex
	kinds map[failureKind]*failureCount
}

// failureKind is what a line says: its level, its message (what happened
// and what the engine does about it) and the error.
type failureKind struct {
	level zapcore.Level
	msg   string
	err   string
}

type failureCount struct {
	unlogged int64     // failures since the kind's last line
	logged   time.Time // when that line was written
}

func newFailureLog(log *zap.SugaredLogger) *failureLog {
	return &failureLog{log: log, period: failureLogPeriod, now: time.Now, kinds: map[failureKind]*failureCount{}}
}

// warn notes n failures that will be tried again. id, when set, is the
// one failed message's ID (see note).
func (f *failureLog) warn(msg string, err error, id string, n int) {
	f.note(zapcore.WarnLevel, msg, err, id, n)
}

// error notes n failures that ended a message's way to its sink: dropped,
// sent to the fallback sink, or handed back to the source.
func (f *failureLog) error(msg string, err error, id string, n int) {
	f.note(zapcore.ErrorLevel, msg, err, id, n)
}

// note counts n failures of a kind, and logs them at once when the kind's
// last line is a period old (or there was none). An adapter's error often
// names the message ("publish IN:42: no responders"): the ID id is taken
// out of the error's text, so that one cause is one kind.
func (f *failureLog) note(level zapcore.Level, msg string, err error, id string, n int) {
	if n <= 0 {
		return
	}
	text := ""
	if err != nil {
		text = err.Error()
		if id != "" {
			text = strings.ReplaceAll(text, id, "<message>")
		}
	}
	k := failureKind{level, msg, text}
	now := f.now()
	f.mu.Lock()
	c := f.kinds[k]
	if c == nil {
		if len(f.kinds) >= maxFailureKinds {
			k.err = otherFailures
			c = f.kinds[k]
		}
		if c == nil {
			c = &failureCount{}
			f.kinds[k] = c
		}
	}
	c.unlogged += int64(n)
	var count int64
	if c.logged.IsZero() || now.Sub(c.logged) >= f.period {
		count, c.unlogged, c.logged = c.unlogged, 0, now
	}
	f.mu.Unlock()
	if count > 0 {
		f.write(k, count)
	}
}

// flush logs the kinds with failures not logged whose last line is a
// period old (all of them when final), and forgets the kinds that had no
// failure for a period, so that the next one is logged at once.
func (f *failureLog) flush(final bool) {
	now := f.now()
	type line struct {
		k     failureKind
		count int64
	}
	var lines []line
	f.mu.Lock()
	for k, c := range f.kinds {
		due := final || now.Sub(c.logged) >= f.period
		switch {
		case c.unlogged > 0 && due:
			lines = append(lines, line{k, c.unlogged})
			c.unlogged, c.logged = 0, now
		case c.unlogged == 0 && due:
			delete(f.kinds, k)
		}
	}
	f.mu.Unlock()
	for _, l := range lines {
		f.write(l.k, l.count)
	}
}

// run flushes every period until done is closed, then for the last time.
func (f *failureLog) run(done <-chan struct{}) {
	t := time.NewTicker(f.period)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			f.flush(false)
		case <-done:
			f.flush(true)
			return
		}
	}
}

func (f *failureLog) write(k failureKind, count int64) {
	f.log.Logw(k.level, k.msg, "count", count, "error", k.err)
}
