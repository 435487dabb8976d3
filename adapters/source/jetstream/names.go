package jetstream

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// validName reports whether s can name a stream or consumer: the server
// refuses '.', '*', '>', path separators, names over 255 bytes, and stores
// control characters badly.
func validName(s string) bool {
	if s == "" || len(s) > 255 || !utf8.ValidString(s) || strings.ContainsAny(s, ".*>/\\") {
		return false
	}
	return printable(s)
}

// validFilter reports whether s is a subject a consumer can filter on.
func validFilter(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	tokens := strings.Split(s, ".")
	for i, t := range tokens {
		if t == "" || (t == ">" && i != len(tokens)-1) || !printable(t) {
			return false
		}
	}
	return true
}

// overlapsAny reports whether filter matches some subject one of subjects
// can hold. A stream without subjects of its own (a mirror, or one that
// only sources others) can hold any subject.
func overlapsAny(filter string, subjects []string) bool {
	if len(subjects) == 0 {
		return true
	}
	f := strings.Split(filter, ".")
	for _, s := range subjects {
		if subjectsOverlap(f, strings.Split(s, ".")) {
			return true
		}
	}
	return false
}

// subjectsOverlap reports whether some subject matches both a and b, given
// as tokens: NATS matching, where '*' is any one token and '>' one or more
// trailing tokens.
func subjectsOverlap(a, b []string) bool {
	for i := 0; ; i++ {
		if i == len(a) || i == len(b) {
			return len(a) == len(b)
		}
		if a[i] == ">" || b[i] == ">" {
			return true
		}
		if a[i] != b[i] && a[i] != "*" && b[i] != "*" {
			return false
		}
	}
}

// printable reports whether s has no white space and no control or other
// unprintable characters, which names and subjects may not hold.
func printable(s string) bool {
	for _, r := range s {
		if unicode.IsSpace(r) || !unicode.IsPrint(r) {
			return false
		}
	}
	return true
}
