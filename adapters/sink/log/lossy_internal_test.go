package log

import (
	"testing"
	"unicode/utf8"
)

// TestUTF8SeqAgreesWithGoOnValidity checks utf8Seq against Go's decoder
// over every lead byte with second, third and fourth bytes at and around
// the edges of the continuation ranges: it calls a sequence valid exactly
// when utf8.DecodeRune does, and an invalid part is a maximal subpart —
// the start of some valid sequence (utf8.FullRune false), which the next
// byte, if any, cannot continue (FullRune true).
func TestUTF8SeqAgreesWithGoOnValidity(t *testing.T) {
	edges := []byte{0x00, 0x41, 0x7F, 0x80, 0x81, 0x8F, 0x90, 0x9F, 0xA0, 0xBF, 0xC0, 0xC2, 0xE0, 0xF0, 0xFF}
	for lead := 0x80; lead <= 0xFF; lead++ {
		for _, b1 := range edges {
			for _, b2 := range edges {
				for _, b3 := range edges {
					full := []byte{byte(lead), b1, b2, b3}
					for l := 1; l <= len(full); l++ {
						p := full[:l]
						n, valid := utf8Seq(p, 0)
						r, size := utf8.DecodeRune(p)
						goValid := r != utf8.RuneError || size > 1
						if valid != goValid || (valid && n != size) {
							t.Fatalf("% x: utf8Seq says %d, %v; utf8.DecodeRune %d, %v", p, n, valid, size, goValid)
						}
						if !valid && (n < 1 || n > l || (n > 1 && utf8.FullRune(p[:n])) || (n < l && !utf8.FullRune(p[:n+1]))) {
							t.Fatalf("% x: invalid part of %d bytes is not its maximal subpart", p, n)
						}
					}
				}
			}
		}
	}
}
