package jetstream

// HeldCount is how many deliveries s keeps sending in-progress acks for.
func HeldCount(s *Source) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.held)
}

// OverlapsAny is overlapsAny, for the table of subject matching.
var OverlapsAny = overlapsAny

// AckEach is ackEach: every ack confirmed on its own, as after a reconnect.
var AckEach = (*Source).ackEach
