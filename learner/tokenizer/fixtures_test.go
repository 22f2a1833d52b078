package tokenizer

import (
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// go test ./learner/tokenizer/ -run TestWriteFixtures -update rewrites the
// tokenizer.json fixtures in testdata/; testdata/gen_golden.mjs then writes
// the reference encodings of them (see that script's header).
var update = flag.Bool("update", false, "rewrite testdata fixtures")

// The fixtures: one trained vocabulary in the four pre-tokenizer setups this
// package reads.
// builtin.tokenizer.json is Builtin()'s Save output, checked by the same
// reference.
var fixtureNames = []string{"qwen2", "qwen2-nfc", "llama3", "gpt2", "builtin"}

func fixturePath(name string) string {
	return filepath.Join("testdata", name+".tokenizer.json")
}

func readTexts(t *testing.T) []string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "texts.json"))
	if err != nil {
		t.Fatal(err)
	}
	var texts []string
	if err := json.Unmarshal(data, &texts); err != nil {
		t.Fatal(err)
	}
	return texts
}

// fixtureCorpus mixes the built-in corpus with the test texts and some
// non-Latin prose, so merges exist inside unicode words, whitespace runs and
// punctuation, and a wrong split boundary changes the tokens.
func fixtureCorpus(texts []string) []string {
	corpus := BuiltinCorpus()
	extra := []string{
		"Привет мир! Как дела? Мир большой, дела хорошие.",
		"日本語のテキストです。中文也可以。日本語",
		"naïve café résumé café naïve Ångström",
		"    indented code\n        more indented\n\t\ttabs\t\t",
		"!!! ??? ... !!! ??? ... ---",
		"\U0001F680\U0001F680 \u2764\ufe0f\u2764\ufe0f",
	}
	for i := 0; i < 5; i++ {
		corpus = append(corpus, texts...)
		corpus = append(corpus, extra...)
	}
	return corpus
}

func TestWriteFixtures(t *testing.T) {
	if !*update {
		t.Skip("run with -update to rewrite testdata fixtures")
	}
	specials := make([]string, len(qwenAddedTokens))
	for i, a := range qwenAddedTokens {
		specials[i] = a.content
	}
	tok, err := Train(fixtureCorpus(readTexts(t)), 1500, specials)
	if err != nil {
		t.Fatal(err)
	}
	for i := range tok.added {
		tok.added[i].Special = qwenAddedTokens[i].special
	}
	data, err := tok.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	bench := strings.Join(BuiltinCorpus(), "\n") + "\n" + strings.Join(readTexts(t), "\n")
	if err := os.WriteFile(filepath.Join("testdata", "bench.txt"), []byte(bench), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := Builtin().Save(fixturePath("builtin")); err != nil {
		t.Fatal(err)
	}
	for _, name := range fixtureNames[:4] {
		var f map[string]any
		if err := json.Unmarshal(data, &f); err != nil {
			t.Fatal(err)
		}
		model := f["model"].(map[string]any)
		switch name {
		case "qwen2-nfc":
			f["normalizer"] = map[string]any{"type": "NFC"}
		case "llama3":
			pre := f["pre_tokenizer"].(map[string]any)
			split := pre["pretokenizers"].([]any)[0].(map[string]any)
			split["pattern"] = map[string]any{"Regex": llama3Pattern}
			model["ignore_merges"] = true
			// Tokens no merge reaches: with ignore_merges a piece equal to
			// one of them is emitted whole.
			vocab := model["vocab"].(map[string]any)
			next := len(vocab)
			for _, extra := range []string{"123", "45", "Ġzebra"} {
				vocab[extra] = next
				next++
			}
			for _, a := range f["added_tokens"].([]any) {
				a := a.(map[string]any)
				a["id"] = a["id"].(float64) + 3
			}
			var pairs [][]string
			for _, m := range model["merges"].([]any) {
				pairs = append(pairs, strings.SplitN(m.(string), " ", 2))
			}
			model["merges"] = pairs
		case "gpt2":
			f["pre_tokenizer"] = map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true}
		}
		out, err := json.MarshalIndent(f, "", " ")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(fixturePath(name), append(out, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
