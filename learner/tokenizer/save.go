package tokenizer

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"strings"
)

// The sections Save writes for a tokenizer built here (Train, Builtin): the
// shape of Qwen2's tokenizer.json, without its NFC normalizer.
var (
	byteLevelSection  = json.RawMessage(`{"type":"ByteLevel","add_prefix_space":false,"trim_offsets":false,"use_regex":false}`)
	qwen2PreTokenizer = json.RawMessage(`{"type":"Sequence","pretokenizers":[{"type":"Split","pattern":{"Regex":` +
		mustJSON(qwen2Pattern) + `},"behavior":"Isolated","invert":false},` + string(byteLevelSection) + `]}`)
)

// mustJSON encodes strings and string pairs, which cannot fail. Unlike
// json.Marshal it leaves <, > and & as they are: tokens such as <|im_end|>
// stay readable in the file.
func mustJSON(v any) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		panic(err)
	}
	return strings.TrimSuffix(b.String(), "\n")
}

type addedTokenOut struct {
	ID         int    `json:"id"`
	Content    string `json:"content"`
	SingleWord bool   `json:"single_word"`
	LStrip     bool   `json:"lstrip"`
	RStrip     bool   `json:"rstrip"`
	Normalized bool   `json:"normalized"`
	Special    bool   `json:"special"`
}

type fileOut struct {
	Version       string          `json:"version"`
	Truncation    json.RawMessage `json:"truncation"`
	Padding       json.RawMessage `json:"padding"`
	AddedTokens   []addedTokenOut `json:"added_tokens"`
	Normalizer    json.RawMessage `json:"normalizer"`
	PreTokenizer  json.RawMessage `json:"pre_tokenizer"`
	PostProcessor json.RawMessage `json:"post_processor"`
	Decoder       json.RawMessage `json:"decoder"`
	Model         json.RawMessage `json:"model"`
}

func orNull(raw json.RawMessage) json.RawMessage {
	if len(raw) == 0 {
		return json.RawMessage("null")
	}
	return raw
}

// MarshalJSON returns the tokenizer as tokenizer.json content that Load and
// Hugging Face tokenizers read: vocab in id order, merges as "a b" strings
// (the form every tokenizers version reads) unless a token holds a space.
func (t *Tokenizer) MarshalJSON() ([]byte, error) {
	var model bytes.Buffer
	model.WriteString(`{"type":"BPE","dropout":null,"unk_token":null,"continuing_subword_prefix":null,"end_of_word_suffix":null,"fuse_unk":false,"byte_fallback":false,`)
	if t.ignoreMerges {
		model.WriteString(`"ignore_merges":true,`)
	}
	model.WriteString(`"vocab":{`)
	first := true
	for id, tok := range t.tokens {
		if vid, ok := t.vocab[tok]; !ok || int(vid) != id {
			continue // unused id, or an added token outside the vocab
		}
		if !first {
			model.WriteByte(',')
		}
		first = false
		model.WriteString(mustJSON(tok))
		fmt.Fprintf(&model, ":%d", id)
	}
	model.WriteString(`},"merges":[`)
	pairs := false
	for _, m := range t.mergeSeq {
		if strings.Contains(m[0], " ") || strings.Contains(m[1], " ") {
			pairs = true
		}
	}
	for i, m := range t.mergeSeq {
		if i > 0 {
			model.WriteByte(',')
		}
		if pairs {
			model.WriteString(mustJSON(m))
		} else {
			model.WriteString(mustJSON(m[0] + " " + m[1]))
		}
	}
	model.WriteString(`]}`)

	f := fileOut{
		Version:       "1.0",
		Truncation:    json.RawMessage("null"),
		Padding:       json.RawMessage("null"),
		AddedTokens:   make([]addedTokenOut, len(t.added)),
		Normalizer:    orNull(t.rawNormalizer),
		PreTokenizer:  t.rawPreTokenizer,
		PostProcessor: orNull(t.rawPostProcessor),
		Decoder:       t.rawDecoder,
		Model:         model.Bytes(),
	}
	for i, a := range t.added {
		f.AddedTokens[i] = addedTokenOut{ID: a.ID, Content: a.Content, Normalized: a.Normalized, Special: a.Special}
	}
	var out bytes.Buffer
	enc := json.NewEncoder(&out)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(f); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(out.Bytes(), []byte("\n")), nil
}

// Save writes the tokenizer to path as tokenizer.json.
func (t *Tokenizer) Save(path string) error {
	data, err := t.MarshalJSON()
	if err != nil {
		return fmt.Errorf("tokenizer: save %s: %w", path, err)
	}
	if err := os.WriteFile(path, append(data, '\n'), 0o644); err != nil {
		return fmt.Errorf("tokenizer: save %s: %w", path, err)
	}
	return nil
}
