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
