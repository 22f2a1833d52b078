package tokenizer

import (
	"runtime"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

// TestNFCShrinkBound derives a bound on how much NFC shortens text. Each
// character of the input decomposes, and its first decomposed character
// ends up in exactly one character of the output, whose full decomposition
// it is part of. So an output character c stands for at most
// Σ_{d ∈ NFD(c)} W(d) input bytes, W(d) being the longest character whose
// decomposition starts with d; bytes that are not UTF-8 stay as they are.
func TestNFCShrinkBound(t *testing.T) {
	w := make([]int, utf8.MaxRune+1)
	for r := rune(0); r <= utf8.MaxRune; r++ {
		if utf8.ValidRune(r) {
			d := appendDecomposed(nil, r)
			w[d[0]] = max(w[d[0]], utf8.RuneLen(r))
		}
	}
	worst, at := 0.0, rune(0)
	for r := rune(0); r <= utf8.MaxRune; r++ {
		if !utf8.ValidRune(r) {
			continue
		}
		in := 0
		for _, d := range appendDecomposed(nil, r) {
			in += w[d]
		}
		if f := float64(in) / float64(utf8.RuneLen(r)); f > worst {
			worst, at = f, r
		}
	}
	if worst > float64(nfcShrinkNum)/float64(nfcShrinkDen) {
		t.Fatalf("NFC may shorten text %.2f times (at %U), more than the %d/%d MaxBytesPerToken assumes", worst, at, nfcShrinkNum, nfcShrinkDen)
	}
	// Cases that reach 3: a compatibility singleton and Hangul jamo.
	for _, s := range []string{"\u212A", "\u1100\u1161\u11A8", "U\u0308\u0304", "\u212B\u0301"} {
		if n := len(nfc(s)); 2*len(s) > 7*n {
			t.Errorf("nfc(%+q) is %d bytes, from %d", s, n, len(s))
		}
	}
}

func limitTexts(t *testing.T) []string {
	return append(readTexts(t),
		"",
		"<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n",
		"<|im_end|><|im_end|><|im_end|>",
		strings.Repeat("a", 5000),
		strings.Repeat("Ǖ U\u0308\u0304 \u212A \u1100\u1161\u11A8 ", 50),
		strings.Repeat("12345 ", 200),
	)
}

// TestEncodeLimit checks that EncodeLimit is Encode for texts that fit and
// refuses exactly those that do not, at every limit around the length.
func TestEncodeLimit(t *testing.T) {
	for _, name := range fixtureNames {
		tok := loadFixture(t, name)
		for _, text := range limitTexts(t) {
			want := tok.Encode(text)
			for _, limit := range []int{0, 1, len(want) / 2, len(want) - 1, len(want), len(want) + 1, 10 * len(want)} {
				if limit < 0 {
					continue
				}
				got, ok := tok.EncodeLimit(text, limit)
				if fits := len(want) <= limit; ok != fits || (ok && !slices.Equal(got, want)) || (!ok && got != nil) {
					t.Errorf("%s: EncodeLimit(%.30q, %d) = %d ids, %v; Encode gives %d ids", name, text, limit, len(got), ok, len(want))
				}
			}
		}
	}
}

// TestMaxBytesPerToken checks the bound on real encodings: no text has
// fewer than ceil(bytes / MaxBytesPerToken) tokens.
func TestMaxBytesPerToken(t *testing.T) {
	for _, name := range fixtureNames {
		tok := loadFixture(t, name)
		k := tok.MaxBytesPerToken()
		if k < tok.longestToken() {
			t.Errorf("%s: MaxBytesPerToken %d below the longest token %d", name, k, tok.longestToken())
		}
		for _, text := range limitTexts(t) {
			if n := len(tok.Encode(text)); n*k < len(text) {
				t.Errorf("%s: %.30q: %d bytes in %d tokens, more than %d bytes a token", name, text, len(text), n, k)
			}
		}
	}
}

// TestEncodeLimitMemory: a text far over the limit is refused with little
// memory, whether its length alone tells (a long text) or its first piece
// does (one word of 4 MiB, which merging would hold as 4 Mi symbols).
func TestEncodeLimitMemory(t *testing.T) {
	tok := Builtin()
	word := strings.Repeat("a", 4<<20)
	const limit = 1000
	cases := []struct {
		name  string
		text  string
		limit int
	}{
		{"long text", word, limit},
		{"long piece", word, len(word)/tok.MaxBytesPerToken() + 1},
	}
	for _, c := range cases {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		ids, ok := tok.EncodeLimit(c.text, c.limit)
		runtime.ReadMemStats(&after)
		if ok || ids != nil {
			t.Errorf("%s: EncodeLimit accepted %d ids", c.name, len(ids))
		}
		if alloc := after.TotalAlloc - before.TotalAlloc; alloc > uint64(8*c.limit)+1<<20 {
			t.Errorf("%s: EncodeLimit allocated %d bytes for a limit of %d tokens", c.name, alloc, c.limit)
		}
	}
}
