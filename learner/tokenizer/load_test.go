package tokenizer

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
)

// mutateFixture loads the qwen2 fixture as generic JSON, applies edit and
// writes the result to a temporary tokenizer.json.
func mutateFixture(t *testing.T, edit func(f map[string]any)) string {
	t.Helper()
	data, err := os.ReadFile(fixturePath("qwen2"))
	if err != nil {
		t.Fatal(err)
	}
	var f map[string]any
	if err := json.Unmarshal(data, &f); err != nil {
		t.Fatal(err)
	}
	edit(f)
	out, err := json.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "tokenizer.json")
	if err := os.WriteFile(path, out, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func writeFile(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "tokenizer.json")
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func model(f map[string]any) map[string]any { return f["model"].(map[string]any) }

func TestLoadErrors(t *testing.T) {
	fixture, err := os.ReadFile(fixturePath("qwen2"))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name        string
		path        func(t *testing.T) string
		want        []string // substrings of the error
		unsupported bool
	}{
		{"missing file", func(t *testing.T) string { return filepath.Join(t.TempDir(), "nope.json") },
			[]string{"nope.json", "no such file"}, false},
		{"truncated", func(t *testing.T) string { return writeFile(t, string(fixture[:len(fixture)/2])) },
			[]string{"invalid JSON", "unexpected end"}, false},
		{"not JSON", func(t *testing.T) string { return writeFile(t, "vocab: [1, 2]") },
			[]string{"invalid JSON at byte offset"}, false},
		{"no model", func(t *testing.T) string { return writeFile(t, `{"version": "1.0"}`) },
			[]string{"field model: missing"}, false},
		{"WordPiece", func(t *testing.T) string {
			return mutateFixture(t, func(f map[string]any) { model(f)["type"] = "WordPiece" })
		}, []string{"model.type", `"WordPiece"`}, true},
		{"Unigram", func(t *testing.T) string {
			return writeFile(t, `{"model": {"type": "Unigram", "vocab": [["a", -1.5]]}}`)
		}, []string{"model.type", `"Unigram"`}, true},
		{"vocab of wrong type", func(t *testing.T) string {
			return mutateFixture(t, func(f map[string]any) { model(f)["vocab"] = []any{"a", "b"} })
		}, []string{"field model.vocab", "array"}, false},
		{"vocab id of wrong type", func(t *testing.T) string {
			return mutateFixture(t, func(f map[string]any) { model(f)["vocab"].(map[string]any)["Ġthe"] = "7" })
		}, []string{"model.vocab", "string"}, false},
		{"merges missing", func(t *testing.T) string {
			return mutateFixture(t, func(f map[string]any) { delete(model(f), "merges") })
		}, []string{"field model.merges: missing"}, false},
		{"merge of unknown token", func(t *testing.T) string {
			return mutateFixture(t, func(f map[string]any) {
				m := model(f)["merges"].([]any)
				m[3] = "Ġ zzzqqq"
			})
		}, []string{"model.merges[3]", `"zzzqqq" is not in model.vocab`}, false},
		{"merge result not in vocab", func(t *testing.T) string {
			return mutateFixture(t, func(f map[string]any) {
				m := model(f)["merges"].([]any)
				m[5] = "q q"
			})
		}, []string{"model.merges[5]", `merged token "qq"`}, false},
		{"merge with three parts", func(t *testing.T) string {
			return mutateFixture(t, func(f map[string]any) { model(f)["merges"].([]any)[0] = "a b c" })
		}, []string{"model.merges[0]", "two tokens"}, false},
		{"merge of wrong type", func(t *testing.T) string {
			return mutateFixture(t, func(f map[string]any) { model(f)["merges"].([]any)[2] = 17 })
		}, []string{"model.merges[2]", "neither"}, false},
		{"byte token missing", func(t *testing.T) string {
			return mutateFixture(t, func(f map[string]any) { delete(model(f)["vocab"].(map[string]any), "Ā") })
		}, []string{"model.vocab", "byte 0x00"}, false},
		{"duplicate vocab id", func(t *testing.T) string {
			return mutateFixture(t, func(f map[string]any) { model(f)["vocab"].(map[string]any)["zz"] = 65.0 })
		}, []string{"model.vocab", "share id 65"}, false},
		{"byte fallback", func(t *testing.T) string {
			return mutateFixture(t, func(f map[string]any) { model(f)["byte_fallback"] = true })
		}, []string{"model.byte_fallback"}, true},
		{"NFKC normalizer", func(t *testing.T) string {
			return mutateFixture(t, func(f map[string]any) { f["normalizer"] = map[string]any{"type": "NFKC"} })
		}, []string{"normalizer.type", `"NFKC"`}, true},
		{"unknown split pattern", func(t *testing.T) string {
			return mutateFixture(t, func(f map[string]any) {
				p := f["pre_tokenizer"].(map[string]any)["pretokenizers"].([]any)[0].(map[string]any)
				p["pattern"] = map[string]any{"Regex": `\w+|\s+`}
			})
		}, []string{"pre_tokenizer.pretokenizers[0].pattern.Regex", `\\w+|\\s+`}, true},
		{"Metaspace pre-tokenizer", func(t *testing.T) string {
			return mutateFixture(t, func(f map[string]any) { f["pre_tokenizer"] = map[string]any{"type": "Metaspace"} })
		}, []string{"pre_tokenizer.type", "Metaspace"}, true},
		{"add_prefix_space", func(t *testing.T) string {
			return mutateFixture(t, func(f map[string]any) {
				f["pre_tokenizer"] = map[string]any{"type": "ByteLevel", "add_prefix_space": true}
			})
		}, []string{"pre_tokenizer.add_prefix_space"}, true},
		{"no decoder", func(t *testing.T) string {
			return mutateFixture(t, func(f map[string]any) { f["decoder"] = nil })
		}, []string{"field decoder"}, true},
		{"added token without id", func(t *testing.T) string {
			return mutateFixture(t, func(f map[string]any) { delete(f["added_tokens"].([]any)[2].(map[string]any), "id") })
		}, []string{"added_tokens[2].id: missing"}, false},
		{"added token lstrip", func(t *testing.T) string {
			return mutateFixture(t, func(f map[string]any) { f["added_tokens"].([]any)[1].(map[string]any)["lstrip"] = true })
		}, []string{"added_tokens[1]", "lstrip", "<|im_start|>"}, true},
		{"added token on a vocab id", func(t *testing.T) string {
			return mutateFixture(t, func(f map[string]any) { f["added_tokens"].([]any)[0].(map[string]any)["id"] = 300 })
		}, []string{"added_tokens[0].id", "id 300"}, false},
		// Ids index dense tables: an id of 2^40 had the loader allocate
		// that many entries (the process died of it).
		{"vocab id far past the tokens", func(t *testing.T) string {
			return mutateFixture(t, func(f map[string]any) { model(f)["vocab"].(map[string]any)["zz"] = float64(1 << 40) })
		}, []string{`model.vocab["zz"]`, "id 1099511627776 is far past the"}, false},
		{"added token id far past the tokens", func(t *testing.T) string {
			return mutateFixture(t, func(f map[string]any) { f["added_tokens"].([]any)[1].(map[string]any)["id"] = float64(1 << 40) })
		}, []string{"added_tokens[1].id", "id 1099511627776 is far past the"}, false},
		{"a device", func(t *testing.T) string {
			p := filepath.Join(t.TempDir(), "tokenizer.json")
			if err := os.Symlink("/dev/zero", p); err != nil {
				t.Skip(err)
			}
			return p
		}, []string{"not a regular file"}, false},
		{"a pipe", func(t *testing.T) string {
			p := filepath.Join(t.TempDir(), "tokenizer.json")
			if err := syscall.Mkfifo(p, 0o644); err != nil {
				t.Skip("mkfifo:", err)
			}
			return p
		}, []string{"not a regular file"}, false},
		{"added token content of wrong type", func(t *testing.T) string {
			return mutateFixture(t, func(f map[string]any) { f["added_tokens"].([]any)[0].(map[string]any)["content"] = 5 })
		}, []string{"added_tokens.content", "number"}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := tc.path(t)
			tok, err := Load(path)
			if err == nil {
				t.Fatalf("Load succeeded (vocab %d), want an error", tok.VocabSize())
			}
			msg := err.Error()
			for _, w := range append([]string{path}, tc.want...) {
				if !strings.Contains(msg, w) {
					t.Errorf("error %q does not mention %q", msg, w)
				}
			}
			if got := errors.Is(err, ErrUnsupported); got != tc.unsupported {
				t.Errorf("errors.Is(err, ErrUnsupported) = %v, want %v (%v)", got, tc.unsupported, err)
			}
		})
	}
}

// TestLoadMergeForms checks that "a b" strings and ["a", "b"] pairs load to
// the same tokenizer.
func TestLoadMergeForms(t *testing.T) {
	strs := loadFixture(t, "qwen2")
	pairs, err := Load(mutateFixture(t, func(f map[string]any) {
		m := model(f)["merges"].([]any)
		for i, s := range m {
			a, b, _ := strings.Cut(s.(string), " ")
			m[i] = []any{a, b}
		}
	}))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(strs.mergeSeq, pairs.mergeSeq) {
		t.Fatal("merge lists differ")
	}
	for _, text := range readTexts(t) {
		if a, b := strs.Encode(text), pairs.Encode(text); !slices.Equal(a, b) {
			t.Errorf("Encode(%q): %v with strings, %v with pairs", text, a, b)
		}
	}
}

// TestSaveRoundTrip checks that Save writes what Load reads back to the same
// tokenizer, and that saving that again gives the same bytes.
func TestSaveRoundTrip(t *testing.T) {
	texts := readTexts(t)
	for _, name := range fixtureNames {
		t.Run(name, func(t *testing.T) {
			orig := loadFixture(t, name)
			dir := t.TempDir()
			first := filepath.Join(dir, "a.json")
			if err := orig.Save(first); err != nil {
				t.Fatal(err)
			}
			again, err := Load(first)
			if err != nil {
				t.Fatal(err)
			}
			if again.VocabSize() != orig.VocabSize() || !slices.Equal(again.mergeSeq, orig.mergeSeq) ||
				!slices.Equal(again.AddedTokens(), orig.AddedTokens()) {
				t.Fatal("vocabulary, merges or added tokens changed")
			}
			for _, text := range texts {
				if a, b := orig.Encode(text), again.Encode(text); !slices.Equal(a, b) {
					t.Errorf("Encode(%q) = %v after the round trip, %v before", text, b, a)
				}
			}
			second := filepath.Join(dir, "b.json")
			if err := again.Save(second); err != nil {
				t.Fatal(err)
			}
			a, _ := os.ReadFile(first)
			b, _ := os.ReadFile(second)
			if string(a) != string(b) {
				t.Error("Save(Load(Save(x))) differs from Save(x)")
			}
		})
	}
}

func TestSaveError(t *testing.T) {
	path := filepath.Join(t.TempDir(), "missing-dir", "tokenizer.json")
	err := Builtin().Save(path)
	if err == nil || !strings.Contains(err.Error(), path) {
		t.Fatalf("Save to a missing directory: %v, want an error naming %s", err, path)
	}
}
