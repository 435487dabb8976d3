package jetstream

// Awaiting is how many publishes of s await their ack, and how many writes
// are tracked.
func Awaiting(s *Sink) (publishes, writes int) {
	s.pub.mu.Lock()
	defer s.pub.mu.Unlock()
	return s.pub.pending, len(s.pub.writes)
}

// ReplyPrefix is the prefix of the reply subjects of s's publishes.
func ReplyPrefix(s *Sink) string { return s.pub.prefix }
