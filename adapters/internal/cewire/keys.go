package cewire

import (
	"strings"
	"unicode/utf8"
)

// EncodeKeys joins message keys into one partitionkey value. Each key is
// escaped so the value splits back exactly: '%' becomes %25, ',' becomes
// %2C, and control characters and bytes that are not UTF-8 become %XX. The
// keys are then joined with ','. A single plain key ("user-42") stays as it
// is, which is what Knative's Kafka sink and other partitionkey consumers
// expect.
func EncodeKeys(keys []string) string {
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(',')
		}
		escapeKey(&b, k)
	}
	return b.String()
}

const hexDigits = "0123456789ABCDEF"

func escapeKey(b *strings.Builder, k string) {
	for i := 0; i < len(k); {
		c := k[i]
		if c < 0x80 {
			if c == '%' || c == ',' || c < 0x20 || c == 0x7f {
				b.WriteByte('%')
				b.WriteByte(hexDigits[c>>4])
				b.WriteByte(hexDigits[c&0xf])
			} else {
				b.WriteByte(c)
			}
			i++
			continue
		}
		r, size := decodeRune(k[i:])
		if r < 0 || (r >= 0x80 && r <= 0x9f) {
			for j := 0; j < size; j++ {
				b.WriteByte('%')
				b.WriteByte(hexDigits[k[i+j]>>4])
				b.WriteByte(hexDigits[k[i+j]&0xf])
			}
		} else {
			b.WriteString(k[i : i+size])
		}
		i += size
	}
}

// DecodeKeys splits a partitionkey value into message keys: it splits on ','
// and decodes %XX escapes; a '%' not followed by two hex digits is kept as
// it is, so partitionkeys written by other producers survive.
func DecodeKeys(v string) []string {
	parts := strings.Split(v, ",")
	for i, p := range parts {
		parts[i] = unescapeKey(p)
	}
	return parts
}

func unescapeKey(p string) string {
	if !strings.Contains(p, "%") {
		return p
	}
	var b strings.Builder
	b.Grow(len(p))
	for i := 0; i < len(p); i++ {
		if p[i] == '%' && i+2 < len(p) && isHex(p[i+1]) && isHex(p[i+2]) {
			b.WriteByte(unhex(p[i+1])<<4 | unhex(p[i+2]))
			i += 2
			continue
		}
		b.WriteByte(p[i])
	}
	return b.String()
}

func isHex(c byte) bool {
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')
}

func unhex(c byte) byte {
	switch {
	case c >= '0' && c <= '9':
		return c - '0'
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10
	}
	return c - 'A' + 10
}

// decodeRune returns the rune at the start of s and its size, or -1 and 1
// for a byte that does not start valid UTF-8.
func decodeRune(s string) (rune, int) {
	r, size := utf8.DecodeRuneInString(s)
	if r == utf8.RuneError && size <= 1 {
		return -1, 1
	}
	return r, size
}
