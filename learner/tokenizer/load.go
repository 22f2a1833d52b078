package tokenizer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/rlnode/rlnode/internal/readfile"
)

// The parts of tokenizer.json this package reads. Sections kept verbatim for
// Save are json.RawMessage.
type fileJSON struct {
	Version       string           `json:"version"`
	AddedTokens   []addedTokenJSON `json:"added_tokens"`
	Normalizer    json.RawMessage  `json:"normalizer"`
	PreTokenizer  json.RawMessage  `json:"pre_tokenizer"`
	PostProcessor json.RawMessage  `json:"post_processor"`
	Decoder       json.RawMessage  `json:"decoder"`
	Model         json.RawMessage  `json:"model"`
	Truncation    json.RawMessage  `json:"truncation"`
	Padding       json.RawMessage  `json:"padding"`
}

type addedTokenJSON struct {
	ID         *int   `json:"id"`
	Content    string `json:"content"`
	SingleWord bool   `json:"single_word"`
	LStrip     bool   `json:"lstrip"`
	RStrip     bool   `json:"rstrip"`
	Normalized bool   `json:"normalized"`
	Special    bool   `json:"special"`
}

type bpeModelJSON struct {
	Type                    string            `json:"type"`
	Dropout                 *float64          `json:"dropout"`
	UnkToken                *string           `json:"unk_token"`
	ContinuingSubwordPrefix *string           `json:"continuing_subword_prefix"`
	EndOfWordSuffix         *string           `json:"end_of_word_suffix"`
	ByteFallback            bool              `json:"byte_fallback"`
	IgnoreMerges            bool              `json:"ignore_merges"`
	Vocab                   map[string]int    `json:"vocab"`
	Merges                  []json.RawMessage `json:"merges"`
}

type sectionJSON struct {
	Type string `json:"type"`
}

type preTokenizerJSON struct {
	Type          string            `json:"type"`
	Pretokenizers []json.RawMessage `json:"pretokenizers"`
	Pattern       *struct {
		Regex  *string `json:"Regex"`
		String *string `json:"String"`
	} `json:"pattern"`
	Behavior       string `json:"behavior"`
	Invert         bool   `json:"invert"`
	AddPrefixSpace bool   `json:"add_prefix_space"`
	UseRegex       *bool  `json:"use_regex"`
}

// Load reads a Hugging Face tokenizer.json of the byte-level BPE kind.
// Errors name the file and the offending field; features this package does
// not implement wrap ErrUnsupported.
func Load(path string) (*Tokenizer, error) {
	data, err := readfile.Regular(path, MaxFileBytes)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: load %s: %w", path, err)
	}
	return Parse(path, data)
}

// MaxFileBytes caps a tokenizer.json: the largest published ones are tens
// of megabytes, and the file is read whole and its vocabulary and merges
// held in tables several times its size.
const MaxFileBytes = 128 << 20

// Parse reads tokenizer.json content; name is used in errors.
func Parse(name string, data []byte) (*Tokenizer, error) {
	t, err := parse(data)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: load %s: %w", name, err)
	}
	return t, nil
}

// jsonError names the field a decoding error is about.
func jsonError(field string, err error) error {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		return fmt.Errorf("invalid JSON at byte offset %d: %v", syn.Offset, err)
	case errors.As(err, &typ):
		path := field
		if typ.Field != "" {
			if path != "" {
				path += "."
			}
			path += typ.Field
		}
		if path == "" {
			path = "(top level)"
		}
		return fmt.Errorf("field %s: JSON %s where %s is expected", path, typ.Value, typ.Type)
	}
	if field != "" {
		return fmt.Errorf("field %s: %v", field, err)
	}
	return err
}

func isNull(raw json.RawMessage) bool {
	return len(raw) == 0 || bytes.Equal(bytes.TrimSpace(raw), []byte("null"))
}

func parse(data []byte) (*Tokenizer, error) {
	var f fileJSON
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, jsonError("", err)
	}
	if isNull(f.Model) {
		return nil, errors.New("field model: missing")
	}
	var kind sectionJSON
	if err := json.Unmarshal(f.Model, &kind); err != nil {
		return nil, jsonError("model", err)
	}
	if kind.Type != "BPE" {
		return nil, fmt.Errorf("field model.type: %w model type %q (only byte-level BPE is implemented)", ErrUnsupported, kind.Type)
	}
	var m bpeModelJSON
	if err := json.Unmarshal(f.Model, &m); err != nil {
		return nil, jsonError("model", err)
	}

	// Ids index dense tables: one id far past the tokens there are would
	// have them take what it says (a vocabulary entry with id 2^40 made
	// the process die). Real files number their tokens 0..n-1, a few with
	// gaps; a gap of up to maxIDGap ids is allowed.
	maxID := len(m.Vocab) + len(f.AddedTokens) + maxIDGap
	t := &Tokenizer{ignoreMerges: m.IgnoreMerges}
	if err := t.readNormalizer(f.Normalizer); err != nil {
		return nil, err
	}
	if err := t.readPreTokenizer(f.PreTokenizer); err != nil {
		return nil, err
	}
	if err := checkDecoder(f.Decoder); err != nil {
		return nil, err
	}
	if err := t.readModel(&m, maxID); err != nil {
		return nil, err
	}
	if err := t.readAddedTokens(f.AddedTokens, maxID); err != nil {
		return nil, err
	}
	t.rawNormalizer, t.rawPreTokenizer = f.Normalizer, f.PreTokenizer
	t.rawPostProcessor, t.rawDecoder = f.PostProcessor, f.Decoder
	return t, nil
}

func (t *Tokenizer) readNormalizer(raw json.RawMessage) error {
	if isNull(raw) {
		return nil
	}
	var n struct {
		Type        string            `json:"type"`
		Normalizers []json.RawMessage `json:"normalizers"`
	}
	if err := json.Unmarshal(raw, &n); err != nil {
		return jsonError("normalizer", err)
	}
	switch {
	case n.Type == "NFC":
		t.nfc = true
		return nil
	case n.Type == "Sequence" && len(n.Normalizers) == 0:
		return nil
	}
	return fmt.Errorf("field normalizer.type: %w normalizer %q (only NFC or none)", ErrUnsupported, n.Type)
}

// readPreTokenizer accepts the two shapes byte-level BPE files use: Qwen2's
// and Llama-3's Sequence[Split(Regex), ByteLevel(use_regex=false)], and
// GPT-2's ByteLevel(use_regex=true).
func (t *Tokenizer) readPreTokenizer(raw json.RawMessage) error {
	const field = "pre_tokenizer"
	if isNull(raw) {
		return fmt.Errorf("field %s: %w: none (a byte-level BPE needs a ByteLevel pre-tokenizer)", field, ErrUnsupported)
	}
	var p preTokenizerJSON
	if err := json.Unmarshal(raw, &p); err != nil {
		return jsonError(field, err)
	}
	switch p.Type {
	case "ByteLevel":
		if err := checkByteLevel(field, p); err != nil {
			return err
		}
		if p.UseRegex != nil && !*p.UseRegex {
			return fmt.Errorf("field %s.use_regex: %w: false with no Split before it", field, ErrUnsupported)
		}
		t.split = splitGPT2
		return nil
	case "Sequence":
		if len(p.Pretokenizers) != 2 {
			return fmt.Errorf("field %s.pretokenizers: %w: %d entries (expected Split then ByteLevel)", field, ErrUnsupported, len(p.Pretokenizers))
		}
		var sp, bl preTokenizerJSON
		if err := json.Unmarshal(p.Pretokenizers[0], &sp); err != nil {
			return jsonError(field+".pretokenizers[0]", err)
		}
		if err := json.Unmarshal(p.Pretokenizers[1], &bl); err != nil {
			return jsonError(field+".pretokenizers[1]", err)
		}
		f0, f1 := field+".pretokenizers[0]", field+".pretokenizers[1]"
		if sp.Type != "Split" {
			return fmt.Errorf("field %s.type: %w pre-tokenizer %q (expected Split)", f0, ErrUnsupported, sp.Type)
		}
		if sp.Pattern == nil || sp.Pattern.Regex == nil {
			return fmt.Errorf("field %s.pattern.Regex: %w: missing", f0, ErrUnsupported)
		}
		s, ok := splitterFor(*sp.Pattern.Regex)
		if !ok {
			return fmt.Errorf("field %s.pattern.Regex: %w split pattern %q (known: Qwen2, Llama-3 and GPT-2 patterns)", f0, ErrUnsupported, *sp.Pattern.Regex)
		}
		if sp.Behavior != "Isolated" || sp.Invert {
			return fmt.Errorf("field %s.behavior: %w: %q invert=%v (only Isolated, invert=false)", f0, ErrUnsupported, sp.Behavior, sp.Invert)
		}
		if bl.Type != "ByteLevel" {
			return fmt.Errorf("field %s.type: %w pre-tokenizer %q (expected ByteLevel)", f1, ErrUnsupported, bl.Type)
		}
		if err := checkByteLevel(f1, bl); err != nil {
			return err
		}
		if bl.UseRegex == nil || *bl.UseRegex {
			return fmt.Errorf("field %s.use_regex: %w: true after a Split (GPT-2's split would run twice)", f1, ErrUnsupported)
		}
		t.split = s
		return nil
	}
	return fmt.Errorf("field %s.type: %w pre-tokenizer %q", field, ErrUnsupported, p.Type)
}

func checkByteLevel(field string, p preTokenizerJSON) error {
	if p.AddPrefixSpace {
		return fmt.Errorf("field %s.add_prefix_space: %w: true", field, ErrUnsupported)
	}
	return nil
}

func checkDecoder(raw json.RawMessage) error {
	if isNull(raw) {
		return fmt.Errorf("field decoder: %w: none (a byte-level BPE needs the ByteLevel decoder)", ErrUnsupported)
	}
	var d sectionJSON
	if err := json.Unmarshal(raw, &d); err != nil {
		return jsonError("decoder", err)
	}
	if d.Type != "ByteLevel" {
		return fmt.Errorf("field decoder.type: %w decoder %q (only ByteLevel)", ErrUnsupported, d.Type)
	}
	return nil
}

// maxIDGap is how many ids a tokenizer.json may leave unused.
const maxIDGap = 1 << 16

func (t *Tokenizer) readModel(m *bpeModelJSON, idLimit int) error {
	switch {
	case m.Dropout != nil && *m.Dropout != 0:
		return fmt.Errorf("field model.dropout: %w: %v (BPE dropout is for training only)", ErrUnsupported, *m.Dropout)
	case m.ContinuingSubwordPrefix != nil && *m.ContinuingSubwordPrefix != "":
		return fmt.Errorf("field model.continuing_subword_prefix: %w: %q", ErrUnsupported, *m.ContinuingSubwordPrefix)
	case m.EndOfWordSuffix != nil && *m.EndOfWordSuffix != "":
		return fmt.Errorf("field model.end_of_word_suffix: %w: %q", ErrUnsupported, *m.EndOfWordSuffix)
	case m.ByteFallback:
		return fmt.Errorf("field model.byte_fallback: %w: true (a SentencePiece-style BPE, not byte-level)", ErrUnsupported)
	case m.Vocab == nil:
		return errors.New("field model.vocab: missing")
	case m.Merges == nil:
		return errors.New("field model.merges: missing")
	}

	maxID := -1
	byID := make(map[int]string, len(m.Vocab))
	for tok, id := range m.Vocab {
		if id < 0 {
			return fmt.Errorf("field model.vocab[%q]: negative id %d", tok, id)
		}
		if id > idLimit {
			return fmt.Errorf("field model.vocab[%q]: id %d is far past the %d tokens the file holds (ids run 0..n-1; at most %d unused)", tok, id, idLimit-maxIDGap, maxIDGap)
		}
		if other, dup := byID[id]; dup {
			a, b := other, tok
			if b < a {
				a, b = b, a
			}
			return fmt.Errorf("field model.vocab: tokens %q and %q share id %d", a, b, id)
		}
		byID[id] = tok
		maxID = max(maxID, id)
	}
	t.vocab = make(map[string]int32, len(m.Vocab))
	for tok, id := range m.Vocab {
		t.vocab[tok] = int32(id)
	}
	t.tokens = make([]string, maxID+1)
	t.tokenRaw = make([][]byte, maxID+1)
	for id, tok := range byID {
		t.setToken(id, tok, true)
	}
	for b := 0; b < 256; b++ {
		id, ok := t.vocab[string(byteToRune[b])]
		if !ok {
			return fmt.Errorf("field model.vocab: byte-level token %q for byte 0x%02x is missing", string(byteToRune[b]), b)
		}
		t.byteIDs[b] = id
	}
	if t.ignoreMerges {
		t.rawVocab = make(map[string]int32, len(t.vocab))
		for tok, id := range t.vocab {
			if raw, ok := byteLevelDecode(tok); ok {
				t.rawVocab[string(raw)] = id
			}
		}
	}

	t.merges = make(map[uint64]merge, len(m.Merges))
	t.mergeSeq = make([][2]string, 0, len(m.Merges))
	for i, raw := range m.Merges {
		a, b, err := parseMerge(raw)
		if err != nil {
			return fmt.Errorf("field model.merges[%d]: %v", i, err)
		}
		if err := t.addMerge(a, b); err != nil {
			return fmt.Errorf("field model.merges[%d]: %v", i, err)
		}
	}
	return nil
}

// setToken records id's spelling and the bytes Decode writes for it. A
// spelling outside the byte-level alphabet (an added token such as
// "<|im_end|>" is inside it; one with a space is not) decodes to its own
// UTF-8 bytes, as Hugging Face's ByteLevel decoder does.
func (t *Tokenizer) setToken(id int, tok string, byteLevel bool) {
	t.tokens[id] = tok
	if byteLevel {
		if raw, ok := byteLevelDecode(tok); ok {
			t.tokenRaw[id] = raw
			return
		}
	}
	t.tokenRaw[id] = []byte(tok)
}

func parseMerge(raw json.RawMessage) (a, b string, err error) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		parts := strings.Split(s, " ")
		if len(parts) != 2 || parts[0] == "" || parts[1] == "" {
			return "", "", fmt.Errorf("%q is not two tokens separated by one space", s)
		}
		return parts[0], parts[1], nil
	}
	var pair []string
	if err := json.Unmarshal(raw, &pair); err != nil || len(pair) != 2 {
		return "", "", fmt.Errorf("%s is neither \"a b\" nor [\"a\", \"b\"]", raw)
	}
	return pair[0], pair[1], nil
}

// addMerge appends the merge rule a + b with the next rank.
func (t *Tokenizer) addMerge(a, b string) error {
	ia, ok := t.vocab[a]
	if !ok {
		return fmt.Errorf("token %q is not in model.vocab", a)
	}
	ib, ok := t.vocab[b]
	if !ok {
		return fmt.Errorf("token %q is not in model.vocab", b)
	}
	ir, ok := t.vocab[a+b]
	if !ok {
		return fmt.Errorf("merged token %q is not in model.vocab", a+b)
	}
	key := pairKey(ia, ib)
	if _, dup := t.merges[key]; !dup { // a repeated rule keeps its first rank
		t.merges[key] = merge{rank: int32(len(t.mergeSeq)), result: ir}
	}
	t.mergeSeq = append(t.mergeSeq, [2]string{a, b})
	return nil
}

func (t *Tokenizer) readAddedTokens(list []addedTokenJSON, maxID int) error {
	seen := make(map[int]bool, len(list))
	for i, a := range list {
		field := fmt.Sprintf("added_tokens[%d]", i)
		switch {
		case a.ID == nil:
			return fmt.Errorf("field %s.id: missing", field)
		case *a.ID < 0:
			return fmt.Errorf("field %s.id: negative id %d", field, *a.ID)
		case *a.ID > maxID:
			return fmt.Errorf("field %s.id: id %d is far past the %d tokens the file holds (ids run 0..n-1; at most %d unused)", field, *a.ID, maxID-maxIDGap, maxIDGap)
		case a.Content == "":
			return fmt.Errorf("field %s.content: empty", field)
		case a.SingleWord || a.LStrip || a.RStrip:
			return fmt.Errorf("field %s: %w: single_word, lstrip or rstrip set on %q", field, ErrUnsupported, a.Content)
		case seen[*a.ID]:
			return fmt.Errorf("field %s.id: id %d is used by an earlier added token", field, *a.ID)
		}
		id := *a.ID
		seen[id] = true
		if vid, ok := t.vocab[a.Content]; ok && int(vid) != id {
			return fmt.Errorf("field %s: %q has id %d but model.vocab gives it %d", field, a.Content, id, vid)
		}
		if id < len(t.tokens) && t.tokenRaw[id] != nil && t.tokens[id] != a.Content {
			return fmt.Errorf("field %s.id: id %d of %q is token %q in model.vocab", field, id, a.Content, t.tokens[id])
		}
		for id >= len(t.tokens) {
			t.tokens = append(t.tokens, "")
			t.tokenRaw = append(t.tokenRaw, nil)
		}
		t.setToken(id, a.Content, true)
		t.added = append(t.added, AddedToken{ID: id, Content: a.Content, Special: a.Special, Normalized: a.Normalized})
	}
	sort.Slice(t.added, func(i, j int) bool { return t.added[i].ID < t.added[j].ID })
	t.indexAdded()
	return nil
}
