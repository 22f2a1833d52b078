package tokenizer

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// benchText is testdata/bench.txt: the built-in corpus (word problems,
// arithmetic, code, English) with the tricky test texts (unicode, emoji,
// whitespace runs), about 100 KB. testdata/bench_reference.mjs times
// Tokenizers.js on the same text and fixture.
func benchText(b *testing.B) string {
	b.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "bench.txt"))
	if err != nil {
		b.Fatal(err)
	}
	return string(data)
}

func BenchmarkEncode(b *testing.B) {
	text := benchText(b)
	for _, name := range []string{"qwen2", "qwen2-nfc", "llama3", "builtin"} {
		b.Run(name, func(b *testing.B) {
			tok, err := Load(fixturePath(name))
			if err != nil {
				b.Fatal(err)
			}
			tok.Encode(text) // fill the word cache
			b.SetBytes(int64(len(text)))
			b.ResetTimer()
			for b.Loop() {
				tok.Encode(text)
			}
		})
	}
}

// BenchmarkEncodeColdCache empties the word cache before every pass, so
// every distinct word goes through BPE merging.
func BenchmarkEncodeColdCache(b *testing.B) {
	text := benchText(b)
	tok, err := Load(fixturePath("qwen2"))
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(text)))
	for b.Loop() {
		tok.cache = wordCache{}
		tok.Encode(text)
	}
}

func BenchmarkDecode(b *testing.B) {
	text := benchText(b)
	tok, err := Load(fixturePath("qwen2"))
	if err != nil {
		b.Fatal(err)
	}
	ids := tok.Encode(text)
	b.SetBytes(int64(len(text)))
	for b.Loop() {
		tok.Decode(ids)
	}
}

func BenchmarkChatTemplateEncode(b *testing.B) {
	tok := Builtin()
	msgs := []Message{
		{Role: "user", Content: "Tom has 12 apples. Anna gives Tom 7 more apples at the park. How many apples does Tom have now?"},
		{Role: "assistant", Content: "Tom starts with 12 apples and gets 7 more, so 12 + 7 = 19. The answer is 19."},
		{Role: "user", Content: "Your previous answer was wrong. Please try again and explain your reasoning."},
	}
	b.SetBytes(int64(len(ChatTemplate(msgs, true))))
	for b.Loop() {
		tok.EncodeChat(msgs, true)
	}
}

func BenchmarkTrainBuiltin(b *testing.B) {
	corpus := BuiltinCorpus()
	b.SetBytes(int64(len(strings.Join(corpus, ""))))
	for b.Loop() {
		if _, err := Train(corpus, BuiltinVocabSize, nil); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkLoadQwenSized loads a synthetic tokenizer.json of Qwen2.5's size
// (151,643 vocabulary tokens, 151,387 merges, 22 added tokens).
func BenchmarkLoadQwenSized(b *testing.B) {
	path := filepath.Join(b.TempDir(), "tokenizer.json")
	if err := qwenSized(b).Save(path); err != nil {
		b.Fatal(err)
	}
	info, err := os.Stat(path)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(info.Size())
	for b.Loop() {
		if _, err := Load(path); err != nil {
			b.Fatal(err)
		}
	}
}

// qwenSized builds a tokenizer with Qwen2.5's counts: merges join
// pseudo-random pairs of earlier tokens, skipping spellings already taken.
func qwenSized(b *testing.B) *Tokenizer {
	b.Helper()
	const vocab = 151643
	t := &Tokenizer{
		split: splitQwen2, rawPreTokenizer: qwen2PreTokenizer,
		rawPostProcessor: byteLevelSection, rawDecoder: byteLevelSection,
		vocab:  make(map[string]int32, vocab),
		merges: make(map[uint64]merge, vocab),
		tokens: make([]string, vocab+len(qwenAddedTokens)),
	}
	t.tokenRaw = make([][]byte, len(t.tokens))
	for i := 0; i < 256; i++ {
		tok := string(byteToRune[i])
		t.vocab[tok] = int32(i)
		t.setToken(i, tok, true)
		t.byteIDs[i] = int32(i)
	}
	seed := uint64(7)
	next := func(n int) int {
		seed = seed*6364136223846793005 + 1442695040888963407
		return int(seed>>33) % n
	}
	for n := 256; n < vocab; {
		a, c := t.tokens[next(n)], t.tokens[next(n)]
		if _, taken := t.vocab[a+c]; taken || len(a+c) > 24 {
			continue
		}
		t.vocab[a+c] = int32(n)
		t.setToken(n, a+c, true)
		if err := t.addMerge(a, c); err != nil {
			b.Fatal(err)
		}
		n++
	}
	for i, a := range qwenAddedTokens {
		t.setToken(vocab+i, a.content, true)
		t.added = append(t.added, AddedToken{ID: vocab + i, Content: a.content, Special: a.special})
	}
	t.indexAdded()
	return t
}
