package tokenizer

import (
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"
)

// TestTrainHandWorked follows BPE training on "hug hug hug pug pun" by hand.
// Pieces: "hug", " hug" ×2, " pug", " pun" (space is Ġ, byte 0x20).
// Pair counts: u g 4, Ġ h 2, Ġ p 2, p u 2, h u 1, u n 1 → merge "u g".
// Then h ug 3 → merge "h ug". Then Ġ hug 2 and Ġ p 2 tie; the pair with the
// smaller ids wins: Ġ=32 with p=112 before hug=257 → merge "Ġ p".
func TestTrainHandWorked(t *testing.T) {
	tok, err := Train([]string{"hug hug hug pug pun"}, 256+3+1, []string{"<|end|>"})
	if err != nil {
		t.Fatal(err)
	}
	want := [][2]string{{"u", "g"}, {"h", "ug"}, {"Ġ", "p"}}
	if !slices.Equal(tok.mergeSeq, want) {
		t.Fatalf("merges %q, want %q", tok.mergeSeq, want)
	}
	if tok.VocabSize() != 260 {
		t.Errorf("VocabSize() = %d, want 260", tok.VocabSize())
	}
	if id, ok := tok.TokenID("<|end|>"); !ok || id != 259 {
		t.Errorf("TokenID(<|end|>) = %d, %v; want 259", id, ok)
	}
	ids := tok.Encode(" hug pun<|end|>")
	if got := spellings(tok, ids); !slices.Equal(got, []string{"Ġ", "hug", "Ġp", "u", "n", "<|end|>"}) {
		t.Errorf("Encode = %q", got)
	}
}

func TestTrainStopsWithoutRepeatedPairs(t *testing.T) {
	tok, err := Train([]string{"ab cd"}, 1000, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(tok.mergeSeq) != 0 || tok.VocabSize() != 256 {
		t.Errorf("%d merges, vocab %d; want none and 256", len(tok.mergeSeq), tok.VocabSize())
	}
}

func TestTrainErrors(t *testing.T) {
	tests := []struct {
		name      string
		vocabSize int
		specials  []string
		want      string
	}{
		{"vocab too small", 257, []string{"<a>", "<b>"}, "vocabSize 257"},
		{"empty special", 300, []string{""}, "specials[0] is empty"},
		{"repeated special", 300, []string{"<a>", "<a>"}, `specials[1] "<a>" is repeated`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Train([]string{"x"}, tc.vocabSize, tc.specials)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Train: %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

// TestBuiltin checks Builtin against its committed Save output, which
// Tokenizers.js reads (TestEncodeGolden/builtin): training is deterministic
// and the file is a valid Hugging Face tokenizer.json.
func TestBuiltin(t *testing.T) {
	b := Builtin()
	if Builtin() != b {
		t.Error("Builtin() is not computed once")
	}
	if b.VocabSize() != BuiltinVocabSize {
		t.Errorf("VocabSize() = %d, want %d", b.VocabSize(), BuiltinVocabSize)
	}
	if n := len(b.mergeSeq); n < 300 {
		t.Errorf("%d merges, want a few hundred", n)
	}
	got, err := b.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile(fixturePath("builtin"))
	if err != nil {
		t.Fatal(err)
	}
	if string(got)+"\n" != string(want) {
		t.Error("Builtin() no longer matches testdata/builtin.tokenizer.json (rerun TestWriteFixtures -update and gen_golden.mjs if the change is intended)")
	}
	for i, a := range b.AddedTokens() {
		if a.ID != BuiltinVocabSize-len(qwenAddedTokens)+i || a.Content != qwenAddedTokens[i].content || a.Special != qwenAddedTokens[i].special {
			t.Errorf("added token %d = %+v", i, a)
		}
	}
	// The corpus' words are whole tokens.
	for _, word := range []string{" the", " answer", " apples", "The"} {
		if ids := b.Encode(word); len(ids) != 1 {
			t.Errorf("Encode(%q) = %q, want one token", word, spellings(b, ids))
		}
	}
}

func TestSpecialTokens(t *testing.T) {
	for _, name := range []string{"qwen2", "builtin"} {
		tok := loadFixture(t, name)
		end, _ := tok.TokenID(IMEnd)
		eot, _ := tok.TokenID(EndOfText)
		start, ok := tok.TokenID(IMStart)
		if !ok {
			t.Fatalf("%s: no %s", name, IMStart)
		}
		if got := tok.StopIDs(); !slices.Equal(got, []int{end, eot}) {
			t.Errorf("%s: StopIDs() = %v, want [%d %d]", name, got, end, eot)
		}
		call, _ := tok.TokenID("<tool_call>")
		for _, c := range []struct {
			id   int
			want bool
		}{{end, true}, {start, true}, {call, false}, {65, false}, {-1, false}, {1 << 30, false}} {
			if got := tok.IsSpecial(c.id); got != c.want {
				t.Errorf("%s: IsSpecial(%d) = %v", name, c.id, got)
			}
		}
		if _, ok := tok.TokenID("no such token"); ok {
			t.Errorf("%s: TokenID found a token that does not exist", name)
		}
		if s, ok := tok.Token(end); !ok || s != IMEnd {
			t.Errorf("%s: Token(%d) = %q, %v", name, end, s, ok)
		}
	}
}

func TestEncodeChat(t *testing.T) {
	tok := Builtin()
	msgs := []Message{{Role: "user", Content: "What is 2 + 3?"}}
	ids := tok.EncodeChat(msgs, true)
	if !slices.Equal(ids, tok.Encode(ChatTemplate(msgs, true))) {
		t.Fatal("EncodeChat differs from Encode(ChatTemplate)")
	}
	start, _ := tok.TokenID(IMStart)
	end, _ := tok.TokenID(IMEnd)
	var starts, ends int
	for _, id := range ids {
		switch id {
		case start:
			starts++
		case end:
			ends++
		}
	}
	if starts != 3 || ends != 2 || ids[0] != start {
		t.Errorf("%d <|im_start|> and %d <|im_end|> ids (want 3 and 2, first <|im_start|>): %q", starts, ends, spellings(tok, ids))
	}
	if got := tok.Decode(ids); got != ChatTemplate(msgs, true) {
		t.Errorf("Decode(EncodeChat) = %q", got)
	}
}

func TestDecodeSkipsUnknownIDs(t *testing.T) {
	tok := Builtin()
	ids := append([]int{-5}, tok.Encode("hi there")...)
	ids = append(ids, 1<<40, tok.VocabSize())
	if got := tok.Decode(ids); got != "hi there" {
		t.Errorf("Decode = %q, want %q", got, "hi there")
	}
}

// naiveBPE merges by scanning for the lowest-ranked adjacent pair (the
// leftmost among equals) and merging it, one merge at a time: the definition
// bpeWord's heap implements.
func naiveBPE(t *Tokenizer, piece string) []int {
	var ids []int32
	for i := 0; i < len(piece); i++ {
		ids = append(ids, t.byteIDs[piece[i]])
	}
	for {
		best, at := merge{rank: -1}, -1
		for i := 0; i+1 < len(ids); i++ {
			if m, ok := t.merges[pairKey(ids[i], ids[i+1])]; ok && (at < 0 || m.rank < best.rank) {
				best, at = m, i
			}
		}
		if at < 0 {
			break
		}
		ids = slices.Replace(ids, at, at+2, best.result)
	}
	out := make([]int, len(ids))
	for i, id := range ids {
		out[i] = int(id)
	}
	return out
}

func TestBPEMatchesNaive(t *testing.T) {
	tok := loadFixture(t, "qwen2")
	rng := rand.New(rand.NewPCG(1, 2))
	alphabet := []string{"a", "n", "e", "s", "t", " ", "  ", "\n", "é", "日", "本", "!", "?", "0", "ab", "an", "the", "er"}
	pieces := []string{"aaaaaaa", strings.Repeat(" ", 300), strings.Repeat("!?", 50)}
	for i := 0; i < 2000; i++ {
		var sb strings.Builder
		for j := rng.IntN(12) + 1; j > 0; j-- {
			sb.WriteString(alphabet[rng.IntN(len(alphabet))])
		}
		pieces = append(pieces, sb.String())
	}
	for _, p := range pieces {
		if got, want := tok.bpeWord(p, nil), naiveBPE(tok, p); !slices.Equal(got, want) {
			t.Fatalf("bpeWord(%q) = %q, naive %q", p, spellings(tok, got), spellings(tok, want))
		}
	}
}

// TestEncodeConcurrent encodes from many goroutines at once (the word cache
// is shared); run with -race to check the locking.
func TestEncodeConcurrent(t *testing.T) {
	tok := loadFixture(t, "qwen2")
	texts := readTexts(t)
	fresh := loadFixture(t, "qwen2") // its own cache, filled by one goroutine
	want := make([][]int, len(texts))
	for i, s := range texts {
		want[i] = fresh.Encode(s)
	}
	var wg sync.WaitGroup
	errs := make(chan string, 8*len(texts))
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i, s := range texts {
				if got := tok.Encode(s); !slices.Equal(got, want[i]) && len(got)+len(want[i]) > 0 {
					errs <- s
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for s := range errs {
		t.Errorf("concurrent Encode(%q) differs", s)
	}
}

// FuzzRoundTrip checks Decode(Encode(s)) == s for valid UTF-8 under every
// fixture, that no bytes are lost for invalid UTF-8, and that the split
// pieces cover the text.
func FuzzRoundTrip(f *testing.F) {
	data, err := os.ReadFile(fixturePath("qwen2"))
	if err != nil {
		f.Fatal(err)
	}
	var toks []*Tokenizer
	for _, name := range fixtureNames {
		tok, err := Load(fixturePath(name))
		if err != nil {
			f.Fatal(err)
		}
		toks = append(toks, tok)
	}
	for _, s := range []string{"", "Hello world", "I'm 12 <|im_end|>", "a \n\n b\t\t", "🚀 日本語 naïve", "e\u0301", "\xff\xfe", "<|im_start",
		"a\u0328\u0301b", "\u1100\u1161\u11a8", "\u0b47\u0300\u0b3e", "x\u0315\u0300\u05ae\u0300b"} {
		f.Add(s)
	}
	f.Add(string(data[:200]))
	f.Fuzz(func(t *testing.T, s string) {
		for i, tok := range toks {
			ids := tok.Encode(s)
			if fixtureNames[i] == "qwen2-nfc" {
				// NFC changes text by design; decoding gives the normal form.
				if utf8.ValidString(s) {
					if got := tok.Decode(ids); got != nfc(s) {
						t.Fatalf("%s: Decode(Encode(%+q)) = %+q, want NFC %+q", fixtureNames[i], s, got, nfc(s))
					}
				}
				continue
			}
			if got := string(tok.DecodeBytes(ids)); got != s {
				t.Fatalf("%s: DecodeBytes(Encode(%+q)) = %+q", fixtureNames[i], s, got)
			}
			if utf8.ValidString(s) {
				if got := tok.Decode(ids); got != s {
					t.Fatalf("%s: Decode(Encode(%+q)) = %+q", fixtureNames[i], s, got)
				}
			}
		}
		// Normalizing between stable runes equals normalizing the whole
		// text, and NFC is idempotent.
		if n := nfc(s); n != string(appendNFC(nil, s)) || nfc(n) != n {
			t.Fatalf("nfc(%+q) = %+q; whole-text NFC %+q; nfc again %+q", s, n, appendNFC(nil, s), nfc(n))
		}
		for _, sp := range []splitter{splitQwen2, splitLlama3, splitGPT2} {
			if got := strings.Join(sp.split(s), ""); got != s {
				t.Fatalf("split pieces of %+q join to %+q", s, got)
			}
		}
	})
}

// BuiltinSized fits the built-in tokenizer to smaller models: the same
// merges, stopped early, and the added tokens at the end of the vocabulary.
func TestBuiltinSized(t *testing.T) {
	if BuiltinMinVocabSize != 256+len(qwenAddedTokens) {
		t.Fatalf("BuiltinMinVocabSize %d, want %d", BuiltinMinVocabSize, 256+len(qwenAddedTokens))
	}
	full := Builtin()
	for _, n := range []int{BuiltinMinVocabSize, 300, BuiltinVocabSize - 1} {
		tok, err := BuiltinSized(n)
		if err != nil {
			t.Fatal(err)
		}
		if tok.VocabSize() != n {
			t.Errorf("BuiltinSized(%d).VocabSize() = %d", n, tok.VocabSize())
		}
		merges := n - BuiltinMinVocabSize
		if !slices.Equal(tok.mergeSeq, full.mergeSeq[:merges]) {
			t.Errorf("BuiltinSized(%d): merges are not the first %d of Builtin()'s", n, merges)
		}
		added := tok.AddedTokens()
		if len(added) != len(qwenAddedTokens) || added[0].ID != n-len(qwenAddedTokens) || added[len(added)-1].ID != n-1 || !added[0].Special || added[len(added)-1].Special {
			t.Errorf("BuiltinSized(%d): added tokens %+v", n, added)
		}
		text := "Tom has 3 apples. <|im_end|>"
		for _, id := range tok.Encode(text) {
			if id >= n {
				t.Errorf("BuiltinSized(%d): id %d out of range", n, id)
			}
		}
		if got := tok.Decode(tok.Encode(text)); got != text {
			t.Errorf("BuiltinSized(%d): round trip %q", n, got)
		}
	}
	for _, n := range []int{BuiltinVocabSize, 151936} {
		if tok, err := BuiltinSized(n); err != nil || tok != full {
			t.Errorf("BuiltinSized(%d) = %v, %v; want Builtin()", n, tok, err)
		}
	}
	if _, err := BuiltinSized(BuiltinMinVocabSize - 1); err == nil || !strings.Contains(err.Error(), "vocabulary of 277 is below the 278 tokens") {
		t.Errorf("BuiltinSized(277) error %v", err)
	}
}
