// Package jsonlist counts the elements of JSON arrays without decoding
// them. An empty element is 2 bytes of JSON ({} or []) and tens to
// hundreds of bytes decoded, so lists from strangers are counted, and
// refused or kept undecoded past a bound, before they are decoded. It
// owns that count only; a malformed value is counted as far as it goes
// and left for decoding to report.
package jsonlist

// maxDepth is encoding/json's nesting limit: deeper values do not decode.
const maxDepth = 10000

// Longer reports whether raw is a JSON array of more than most elements,
// reading no further than the element past most.
func Longer(raw []byte, most int) bool { return count(raw, most, false) > most }

// LongerNested reports whether the arrays anywhere in the JSON value raw
// hold more than most elements together.
func LongerNested(raw []byte, most int) bool { return count(raw, most, true) > most }

// count counts array elements, of the outer array only or of every
// array, up to most+1.
func count(raw []byte, most int, nested bool) int {
	n := 0
	var arrays []bool // per open container: whether it is an array
	expect := false   // the next value begins an element of the innermost array
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		if c == ' ' || c == '\t' || c == '\r' || c == '\n' {
			continue
		}
		if len(arrays) == 0 && !nested && c != '[' {
			return 0 // not an array
		}
		if expect && c != ']' {
			expect = false
			if n++; n > most {
				return n
			}
		}
		switch c {
		case '"':
			for i++; i < len(raw) && raw[i] != '"'; i++ {
				if raw[i] == '\\' {
					i++
				}
			}
		case '[', '{':
			if len(arrays) == maxDepth {
				return n
			}
			arrays = append(arrays, c == '[')
			expect = c == '[' && (nested || len(arrays) == 1)
		case ']', '}':
			expect = false
			if len(arrays) > 0 {
				arrays = arrays[:len(arrays)-1]
			}
			if len(arrays) == 0 && !nested {
				return n
			}
		case ',':
			if k := len(arrays); k > 0 && arrays[k-1] && (nested || k == 1) {
				expect = true
			}
		}
	}
	return n
}
