package tokenizer

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func readJSON(t *testing.T, name string, v any) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, v); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
}

func loadFixture(t *testing.T, name string) *Tokenizer {
	t.Helper()
	tok, err := Load(fixturePath(name))
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// spellings shows ids as token spellings in failure messages.
func spellings(tok *Tokenizer, ids []int) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		s, ok := tok.Token(id)
		if !ok {
			s = "<unknown>"
		}
		out[i] = s
	}
	return out
}

// TestSplitGolden checks the split scanners against the patterns run by a
// backtracking regex engine (testdata/split_reference.py).
func TestSplitGolden(t *testing.T) {
	var golden struct {
		Patterns map[string]string `json:"patterns"`
		Splits   map[string][]struct {
			Text   string   `json:"text"`
			Pieces []string `json:"pieces"`
		} `json:"splits"`
	}
	readJSON(t, "splits.golden.json", &golden)
	if len(golden.Splits) != 3 {
		t.Fatalf("splits.golden.json has %d patterns, want 3", len(golden.Splits))
	}
	for name, cases := range golden.Splits {
		sp, ok := splitterFor(golden.Patterns[name])
		if !ok {
			t.Fatalf("%s: pattern %q is not one this package recognises", name, golden.Patterns[name])
		}
		for _, c := range cases {
			got := sp.split(c.Text)
			if !slices.Equal(got, c.Pieces) && !(len(got) == 0 && len(c.Pieces) == 0) {
				t.Errorf("%s split %q:\n got %q\nwant %q", name, c.Text, got, c.Pieces)
			}
		}
	}
}

// TestEncodeGolden checks Encode and Decode against Hugging Face's
// Tokenizers.js on the same tokenizer.json files (testdata/gen_golden.mjs).
func TestEncodeGolden(t *testing.T) {
	var golden map[string][]struct {
		Text    string `json:"text"`
		IDs     []int  `json:"ids"`
		Decoded string `json:"decoded"`
	}
	readJSON(t, "encode.golden.json", &golden)
	for _, name := range fixtureNames {
		cases := golden[name]
		if len(cases) == 0 {
			t.Fatalf("encode.golden.json has no cases for %s", name)
		}
		t.Run(name, func(t *testing.T) {
			tok := loadFixture(t, name)
			for _, c := range cases {
				got := tok.Encode(c.Text)
				if !slices.Equal(got, c.IDs) && !(len(got) == 0 && len(c.IDs) == 0) {
					t.Errorf("Encode(%q):\n got %v %q\nwant %v %q", c.Text, got, spellings(tok, got), c.IDs, spellings(tok, c.IDs))
				}
				if d := tok.Decode(c.IDs); d != c.Decoded {
					t.Errorf("Decode(%v) = %q, want %q", c.IDs, d, c.Decoded)
				}
			}
		})
	}
}

func TestDecodeGolden(t *testing.T) {
	var golden []struct {
		IDs  []int  `json:"ids"`
		Text string `json:"text"`
	}
	readJSON(t, "decode.golden.json", &golden)
	tok := loadFixture(t, "qwen2")
	for _, c := range golden {
		if got := tok.Decode(c.IDs); got != c.Text {
			t.Errorf("Decode(%v) = %q, want %q", c.IDs, got, c.Text)
		}
	}
}

// TestChatTemplateGolden checks ChatTemplate against Qwen2.5's Jinja
// template rendered by Hugging Face's Jinja implementation.
func TestChatTemplateGolden(t *testing.T) {
	var golden []struct {
		Messages            []Message `json:"messages"`
		AddGenerationPrompt bool      `json:"add_generation_prompt"`
		Text                *string   `json:"text"`
		Error               *string   `json:"error"`
	}
	readJSON(t, "chat.golden.json", &golden)
	for i, c := range golden {
		if c.Text == nil {
			t.Fatalf("case %d: the reference failed to render: %v", i, *c.Error)
		}
		if got := ChatTemplate(c.Messages, c.AddGenerationPrompt); got != *c.Text {
			t.Errorf("case %d ChatTemplate(%+v, %v):\n got %q\nwant %q", i, c.Messages, c.AddGenerationPrompt, got, *c.Text)
		}
	}
}
