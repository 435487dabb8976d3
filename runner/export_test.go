package runner

// InflightCount is how many source IDs the engine holds as in flight (see
// RedeliversInFlight), for tests that check the set empties.
func InflightCount(e *Engine) int {
	if e.inflight == nil {
		return 0
	}
	e.inflight.mu.Lock()
	defer e.inflight.mu.Unlock()
	return len(e.inflight.ids)
}
