package tokenizer

import "unicode/utf8"

// Qwen2's tokenizer.json normalizes text to NFC before splitting. The
// standard library has no Unicode normalization, so this file implements NFC
// (Unicode Standard Annex #15) over tables generated from the Unicode 15.0
// data (gen_nfc.go → nfc_tables.go), and is checked against the Unicode
// conformance test (normalize_test.go).

//go:generate go run gen_nfc.go

// Hangul syllables compose and decompose by arithmetic (Unicode §3.12).
const (
	hangulSBase  = 0xAC00
	hangulLBase  = 0x1100
	hangulVBase  = 0x1161
	hangulTBase  = 0x11A7
	hangulLCount = 19
	hangulVCount = 21
	hangulTCount = 28
	hangulNCount = hangulVCount * hangulTCount
	hangulSCount = hangulLCount * hangulNCount
)

func ccc(r rune) uint8 {
	if r < 0x300 {
		return 0
	}
	return combiningClass[r]
}

// stable reports whether r is a starter whose NFC_Quick_Check is Yes. No
// rune composes into such a rune from before it, and canonical reordering
// never moves a rune across it, so text can be normalized piecewise between
// stable runes (UAX #15, "Stable Code Points").
func stable(r rune) bool {
	return r < 0x300 || (!nfcQuickCheckNo[r] && combiningClass[r] == 0)
}

// nfc returns text in Normalization Form C. Only the stretches around
// unstable runes are rebuilt; text that is already NFC (nearly all text)
// comes back as it is. Bytes that are not valid UTF-8 are kept as they are
// (they are not characters to normalize), so byte-level BPE still
// round-trips them.
func nfc(text string) string {
	var out []byte // nil until some stretch is rebuilt
	copied := 0    // text[:copied] is in out
	lastStable := 0
	for i := 0; i < len(text); {
		if text[i] < utf8.RuneSelf {
			lastStable = i
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(text[i:])
		if stable(r) {
			lastStable = i
			i += n
			continue
		}
		// The stretch to rebuild runs from the last stable rune, which may
		// compose with what follows, to the next stable rune.
		j := i + n
		for j < len(text) {
			r, m := utf8.DecodeRuneInString(text[j:])
			if stable(r) {
				break
			}
			j += m
		}
		out = append(out, text[copied:lastStable]...)
		out = appendNFC(out, text[lastStable:j])
		copied, i = j, j
	}
	if out == nil {
		return text
	}
	return string(append(out, text[copied:]...))
}

// appendNFC appends the NFC form of s to out.
func appendNFC(out []byte, s string) []byte {
	var seg []rune
	flush := func() {
		for _, r := range compose(seg) {
			out = utf8.AppendRune(out, r)
		}
		seg = seg[:0]
	}
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 {
			flush()
			out = append(out, s[i])
			i++
			continue
		}
		seg = appendDecomposed(seg, r)
		i += n
	}
	flush()
	return out
}

// appendDecomposed appends r's full canonical decomposition.
func appendDecomposed(dst []rune, r rune) []rune {
	if s := r - hangulSBase; s >= 0 && s < hangulSCount {
		dst = append(dst, hangulLBase+s/hangulNCount, hangulVBase+(s%hangulNCount)/hangulTCount)
		if t := s % hangulTCount; t != 0 {
			dst = append(dst, hangulTBase+t)
		}
		return dst
	}
	if r >= 0xC0 {
		if d, ok := decomposition[r]; ok {
			for _, x := range d {
				dst = append(dst, x)
			}
			return dst
		}
	}
	return append(dst, r)
}

// compose puts decomposed runes in canonical order and recomposes them
// (the Canonical Ordering and Canonical Composition Algorithms of §3.11).
func compose(rs []rune) []rune {
	// Canonical ordering: a stable sort by class within each run of
	// non-starters (insertion sort; such runs are short).
	for i := 1; i < len(rs); i++ {
		c := ccc(rs[i])
		if c == 0 {
			continue
		}
		for j := i; j > 0; j-- {
			p := ccc(rs[j-1])
			if p == 0 || p <= c {
				break
			}
			rs[j], rs[j-1] = rs[j-1], rs[j]
		}
	}

	out := rs[:0]
	starter := -1
	var last uint8 // class of the last rune kept after the starter
	for _, r := range rs {
		c := ccc(r)
		if starter >= 0 {
			adjacent := starter == len(out)-1
			// r is not blocked from the starter: nothing between them, or
			// everything between is a non-starter of a lower class.
			if adjacent || (last != 0 && last < c) {
				if comp, ok := composePair(out[starter], r); ok {
					out[starter] = comp
					continue
				}
			}
		}
		if c == 0 {
			starter = len(out)
		}
		last = c
		out = append(out, r)
	}
	return out
}

func composePair(a, b rune) (rune, bool) {
	if l := a - hangulLBase; l >= 0 && l < hangulLCount {
		if v := b - hangulVBase; v >= 0 && v < hangulVCount {
			return hangulSBase + (l*hangulVCount+v)*hangulTCount, true
		}
		return 0, false
	}
	if s := a - hangulSBase; s >= 0 && s < hangulSCount && s%hangulTCount == 0 {
		if t := b - hangulTBase; t > 0 && t < hangulTCount {
			return a + t, true
		}
		return 0, false
	}
	r, ok := composition[uint64(a)<<32|uint64(b)]
	return r, ok
}
