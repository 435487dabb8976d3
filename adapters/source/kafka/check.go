package kafka

import (
	"fmt"
	"sync"
)

// commitCheck is the MV_KAFKA_CHECK_COMMITS test hook: an account of the
// records handed to the engine and not yet acked, kept apart from the
// trackers, against which every commit is checked before it is sent. A
// commit at offset c of a partition is beyond what was acked if a record
// below c was handed out and neither acked nor taken back by a revoke.
type commitCheck struct {
	mu          sync.Mutex
	outstanding map[tp]map[int64]struct{}
	commits     int64
	violations  int64
	first       error
}

func newCommitCheck() *commitCheck {
	return &commitCheck{outstanding: map[tp]map[int64]struct{}{}}
}

func (c *commitCheck) delivered(p tp, off int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := c.outstanding[p]
	if m == nil {
		m = map[int64]struct{}{}
		c.outstanding[p] = m
	}
	m[off] = struct{}{}
}

func (c *commitCheck) acked(p tp, off int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.outstanding[p], off)
}

// released forgets a partition this replica no longer owns: its unacked
// records are the new owner's to deliver.
func (c *commitCheck) released(p tp) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.outstanding, p)
}

// check records a commit of partition p at offset at, and returns an
// error if a record below it is outstanding.
func (c *commitCheck) check(p tp, at int64) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.commits++
	for off := range c.outstanding[p] {
		if off < at {
			c.violations++
			err := fmt.Errorf("kafka source: commit check failed: commit of %s[%d] at %d is beyond offset %d, which was read and not acked", p.topic, p.p, at, off)
			if c.first == nil {
				c.first = err
			}
			return err
		}
	}
	return nil
}

func (c *commitCheck) summary() (commits, violations int64, first error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.commits, c.violations, c.first
}
