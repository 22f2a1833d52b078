package tokenizer

import (
	"unicode"
	"unicode/utf8"
)

// The split patterns this package runs, by their exact text in tokenizer.json.
// Each is implemented by a scanner below that returns the same pieces as
// Oniguruma (which Hugging Face tokenizers uses) returns for the pattern.
const (
	// Qwen2 / Qwen2.5: numbers are split one digit per piece.
	qwen2Pattern = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	// Llama-3: as Qwen2 but numbers in runs of up to three digits.
	llama3Pattern = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	// GPT-2: the pattern built into the ByteLevel pre-tokenizer (use_regex=true).
	gpt2Pattern = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`
)

// splitter names a pre-tokenizer split this package implements.
type splitter uint8

const (
	splitQwen2 splitter = iota + 1
	splitLlama3
	splitGPT2
)

func splitterFor(pattern string) (splitter, bool) {
	switch pattern {
	case qwen2Pattern:
		return splitQwen2, true
	case llama3Pattern:
		return splitLlama3, true
	case gpt2Pattern:
		return splitGPT2, true
	}
	return 0, false
}

func (s splitter) pattern() string {
	switch s {
	case splitQwen2:
		return qwen2Pattern
	case splitLlama3:
		return llama3Pattern
	case splitGPT2:
		return gpt2Pattern
	}
	return ""
}

// runeClass is the partition of runes the patterns distinguish: \p{L},
// \p{N}, the line breaks [\r\n], the rest of \s, and everything else.
type runeClass uint8

const (
	classOther runeClass = iota
	classLetter
	classNumber
	classNewline
	classSpace
)

var asciiClass [utf8.RuneSelf]runeClass

func init() {
	for r := rune(0); r < utf8.RuneSelf; r++ {
		asciiClass[r] = classifySlow(r)
	}
}

func classifySlow(r rune) runeClass {
	switch {
	case r == '\r' || r == '\n':
		return classNewline
	case unicode.IsLetter(r):
		return classLetter
	case unicode.IsNumber(r):
		return classNumber
	case unicode.IsSpace(r): // White_Space, as Oniguruma's \s
		return classSpace
	}
	return classOther
}

func classify(r rune) runeClass {
	if r < utf8.RuneSelf {
		return asciiClass[r]
	}
	return classifySlow(r)
}

func isWhite(c runeClass) bool { return c == classSpace || c == classNewline }

// at decodes the rune at byte offset i of s; past the end it reports size 0.
// Invalid UTF-8 decodes as U+FFFD of size 1 (class other), so its bytes still
// reach the byte-level BPE and survive a round trip.
func at(s string, i int) (rune, int) {
	if i >= len(s) {
		return -1, 0
	}
	if c := s[i]; c < utf8.RuneSelf {
		return rune(c), 1
	}
	return utf8.DecodeRuneInString(s[i:])
}

func classAt(s string, i int) (runeClass, int) {
	r, n := at(s, i)
	if n == 0 {
		return classOther, 0
	}
	return classify(r), n
}

// skipClass returns the end of the run of runes of class c starting at i.
func skipClass(s string, i int, c runeClass) int {
	for i < len(s) {
		k, n := classAt(s, i)
		if k != c {
			break
		}
		i += n
	}
	return i
}

// piece returns the length in bytes of the piece of s that starts at i.
func (sp splitter) piece(s string, i int) int {
	switch sp {
	case splitGPT2:
		return gpt2Piece(s, i)
	case splitLlama3:
		return qwenPiece(s, i, 3)
	}
	return qwenPiece(s, i, 1)
}

// split returns the pieces of s.
func (sp splitter) split(s string) []string {
	var pieces []string
	for i := 0; i < len(s); {
		n := sp.piece(s, i)
		pieces = append(pieces, s[i:i+n])
		i += n
	}
	return pieces
}

// contraction reports the length of 's, 't, 're, 've, 'm, 'll or 'd at i
// (the first alternative of all three patterns), or 0. With fold, letters
// match case-insensitively as under (?i:...), where Unicode simple case
// folding also maps 'ſ' (U+017F, long s) to 's'.
func contraction(s string, i int, fold bool) int {
	if i >= len(s) || s[i] != '\'' {
		return 0
	}
	lower := func(j int) (rune, int) {
		r, n := at(s, j)
		if fold {
			if r == 'ſ' {
				r = 's'
			} else if r >= 'A' && r <= 'Z' {
				r += 'a' - 'A'
			}
		}
		return r, n
	}
	r1, n1 := lower(i + 1)
	switch r1 {
	case 's', 't', 'm', 'd':
		return 1 + n1
	case 'r', 'v', 'l':
		want := 'e'
		if r1 == 'l' {
			want = 'l'
		}
		if r2, n2 := lower(i + 1 + n1); r2 == want {
			return 1 + n1 + n2
		}
	}
	return 0
}

// whitespacePiece handles the trailing alternatives \s+(?!\S)|\s+ for a run
// of white space starting at i that holds no line break the pattern wants:
// a run that ends the text is taken whole; otherwise its last rune is left to
// start the next piece (so " word" keeps its space), unless the run is that
// single rune.
func whitespacePiece(s string, i, end int) int {
	if end == len(s) {
		return end - i
	}
	_, lastSize := utf8.DecodeLastRuneInString(s[i:end])
	if end-lastSize > i {
		return end - lastSize - i
	}
	return end - i
}

// qwenPiece returns the length of the piece starting at i under the Qwen2
// (maxDigits 1) or Llama-3 (maxDigits 3) pattern, trying its alternatives in
// order as a backtracking regex engine does:
//
//	(?i:'s|'t|'re|'ve|'m|'ll|'d)
//	[^\r\n\p{L}\p{N}]?\p{L}+
//	\p{N}{1,maxDigits}
//	 ?[^\s\p{L}\p{N}]+[\r\n]*
//	\s*[\r\n]+
//	\s+(?!\S)
//	\s+
func qwenPiece(s string, i, maxDigits int) int {
	if n := contraction(s, i, true); n > 0 {
		return n
	}
	r0, n0 := at(s, i)
	c0 := classify(r0)
	c1, n1 := classAt(s, i+n0)
	if n1 == 0 {
		c1 = classOther // nothing follows; c1 must not look like a letter
	}

	switch {
	case c0 == classLetter:
		return skipClass(s, i, classLetter) - i
	case c0 != classNumber && c0 != classNewline && n1 > 0 && c1 == classLetter:
		return skipClass(s, i+n0, classLetter) - i
	case c0 == classNumber:
		j := i
		for d := 0; d < maxDigits; d++ {
			k, n := classAt(s, j)
			if n == 0 || k != classNumber {
				break
			}
			j += n
		}
		return j - i
	}

	// ` ?[^\s\p{L}\p{N}]+[\r\n]*`
	start := -1
	if r0 == ' ' && n1 > 0 && c1 == classOther {
		start = i + n0
	} else if c0 == classOther {
		start = i
	}
	if start >= 0 {
		j := skipClass(s, start, classOther)
		for j < len(s) && (s[j] == '\r' || s[j] == '\n') {
			j++
		}
		return j - i
	}

	// c0 is white space. `\s*[\r\n]+`: the greedy \s* backs off to the last
	// line break of the run, so the piece ends just after it.
	end, lastBreak := i, -1
	for end < len(s) {
		k, n := classAt(s, end)
		if !isWhite(k) {
			break
		}
		end += n
		if k == classNewline {
			lastBreak = end
		}
	}
	if lastBreak >= 0 {
		return lastBreak - i
	}
	return whitespacePiece(s, i, end)
}

// gpt2Piece returns the length of the piece starting at i under GPT-2's
// pattern: 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
func gpt2Piece(s string, i int) int {
	if n := contraction(s, i, false); n > 0 {
		return n
	}
	r0, n0 := at(s, i)
	c0 := classify(r0)
	start, c := i, c0
	if r0 == ' ' {
		if c1, n1 := classAt(s, i+n0); n1 > 0 && !isWhite(c1) {
			start, c = i+n0, c1
		}
	}
	if !isWhite(c) {
		return skipClass(s, start, c) - i
	}
	end := i
	for end < len(s) {
		k, n := classAt(s, end)
		if !isWhite(k) {
			break
		}
		end += n
	}
	return whitespacePiece(s, i, end)
}
