package native

import (
	"bytes"
	"strings"
	"unicode/utf8"
)

// detokenizer turns one sample's tokens into text as they arrive: it finds
// stop strings (which may span tokens) and hands out text deltas that are
// final — holding back a character cut between tokens and any tail that
// could still become a stop string.
type detokenizer struct {
	stops   []string
	maxStop int
	buf     []byte // text so far
	sent    int    // bytes of buf handed out
	end     int    // final length once stopped, else -1
}

func newDetokenizer(stops []string) *detokenizer {
	d := &detokenizer{stops: stops, end: -1}
	for _, s := range stops {
		d.maxStop = max(d.maxStop, len(s))
	}
	return d
}

// add appends a token's bytes and reports whether a stop string now
// appears; the text then ends before it.
func (d *detokenizer) add(b []byte) (stopped bool) {
	from := max(0, len(d.buf)-d.maxStop+1)
	d.buf = append(d.buf, b...)
	if d.maxStop == 0 {
		return false
	}
	first := -1
	for _, s := range d.stops {
		if i := bytes.Index(d.buf[from:], []byte(s)); i >= 0 && (first < 0 || from+i < first) {
			first = from + i
		}
	}
	if first < 0 {
		return false
	}
	d.end = first
	return true
}

// delta returns the text that became final since the last call; with done,
// everything left.
func (d *detokenizer) delta(done bool) string {
	limit := len(d.buf)
	if d.end >= 0 {
		limit = d.end
	}
	if !done {
		limit = max(d.sent, limit-d.heldTail())
		limit = d.sent + completeUTF8(d.buf[d.sent:limit])
	}
	if limit <= d.sent {
		return ""
	}
	s := strings.ToValidUTF8(string(d.buf[d.sent:limit]), "\uFFFD")
	d.sent = limit
	return s
}

// heldTail is the length of the longest end of buf that begins a stop
// string: it may still turn out to be one.
func (d *detokenizer) heldTail() int {
	held := 0
	for _, s := range d.stops {
		for k := min(len(s)-1, len(d.buf)); k > held; k-- {
			if bytes.HasSuffix(d.buf, []byte(s[:k])) {
				held = k
				break
			}
		}
	}
	return held
}

// text is the whole final text.
func (d *detokenizer) text() string {
	limit := len(d.buf)
	if d.end >= 0 {
		limit = d.end
	}
	return strings.ToValidUTF8(string(d.buf[:limit]), "\uFFFD")
}

// completeUTF8 is the length of b without a trailing character that more
// bytes could still complete.
func completeUTF8(b []byte) int {
	for back := 1; back <= utf8.UTFMax-1 && back <= len(b); back++ {
		c := b[len(b)-back]
		if c < 0x80 {
			return len(b)
		}
		if utf8.RuneStart(c) {
			if utf8.FullRune(b[len(b)-back:]) {
				return len(b)
			}
			return len(b) - back
		}
	}
	return len(b)
}
