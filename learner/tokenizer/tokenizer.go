package tokenizer

import (
	"encoding/json"
	"errors"
	"sort"
	"strings"
	"sync"
	"unicode/utf8"
)

// ErrUnsupported marks a tokenizer.json feature this package does not
// implement (a model type other than BPE, an unknown split pattern, a
// normalizer other than NFC, ...). Errors wrap it with the file and field.
var ErrUnsupported = errors.New("unsupported")

// Special tokens of the Qwen2 / Qwen2.5 family.
const (
	EndOfText = "<|endoftext|>"
	IMStart   = "<|im_start|>"
	IMEnd     = "<|im_end|>"
)

// AddedToken is an entry of tokenizer.json's added_tokens: a token matched in
// the text before any splitting or merging, such as <|im_end|>.
type AddedToken struct {
	ID      int
	Content string
	// Special tokens are control tokens (chat markers, end of text); the
	// others (Qwen's <tool_call>, FIM markers) are ordinary text to a model.
	Special bool
	// Normalized says whether the token is matched after normalization.
	// Byte-level tokenizers' added tokens are ASCII, which normalization
	// leaves unchanged, so matching runs on the raw text either way.
	Normalized bool
}

// Tokenizer is a byte-level BPE tokenizer. It is safe for concurrent use.
type Tokenizer struct {
	vocab    map[string]int32 // token spelling (byte-level alphabet) → id
	rawVocab map[string]int32 // the bytes a token stands for → id
	tokens   []string         // id → spelling; "" where the id is unused
	tokenRaw [][]byte         // id → bytes that Decode writes
	byteIDs  [256]int32
	merges   map[uint64]merge
	mergeSeq [][2]string // merges in rank order, for Save

	added       []AddedToken   // in id order
	addedByText map[string]int // content → id
	addedByID   map[int]int    // id → index into added
	addedFirst  [256][]int     // first byte → indices into added, longest first

	split        splitter
	ignoreMerges bool
	nfc          bool

	// tokenizer.json sections kept as read, so Save writes them back as
	// they were (a Llama-3 post_processor, for one).
	rawNormalizer, rawPreTokenizer, rawPostProcessor, rawDecoder json.RawMessage

	cache wordCache

	longest     sync.Once // sets longestLen and longestFrom
	longestLen  int
	longestFrom [256]int32
}

// VocabSize is one more than the largest token id, added tokens included.
// (A model's embedding table may be larger: Qwen2.5 pads it to 151936.)
func (t *Tokenizer) VocabSize() int { return len(t.tokens) }

// TokenID returns the id of a token given by its spelling in tokenizer.json
// ("Ġthe", "<|im_end|>").
func (t *Tokenizer) TokenID(tok string) (int, bool) {
	if id, ok := t.addedByText[tok]; ok {
		return id, true
	}
	id, ok := t.vocab[tok]
	return int(id), ok
}

// Token returns the spelling of token id, or false for an unused id.
func (t *Tokenizer) Token(id int) (string, bool) {
	if id < 0 || id >= len(t.tokens) || t.tokenRaw[id] == nil {
		return "", false
	}
	return t.tokens[id], true
}

// AddedTokens returns the added tokens in id order.
func (t *Tokenizer) AddedTokens() []AddedToken { return append([]AddedToken(nil), t.added...) }

// IsSpecial reports whether id is a special added token.
func (t *Tokenizer) IsSpecial(id int) bool {
	if id < 0 || id >= len(t.tokens) {
		return false
	}
	if k, ok := t.addedByID[id]; ok {
		return t.added[k].Special
	}
	return false
}

// StopIDs returns the ids that end a generated turn: <|im_end|> and
// <|endoftext|>, those of the two this tokenizer has (Qwen2.5-Instruct's
// generation_config lists both as eos_token_id).
func (t *Tokenizer) StopIDs() []int {
	var ids []int
	for _, tok := range []string{IMEnd, EndOfText} {
		if id, ok := t.addedByText[tok]; ok {
			ids = append(ids, id)
		}
	}
	return ids
}

// Encode returns the token ids of text, as Hugging Face's
// encode(text, add_special_tokens=False): added tokens written in the text
// (<|im_start|>, <|im_end|>, ...) become their ids; no BOS or other
// post-processor token is added.
func (t *Tokenizer) Encode(text string) []int {
	ids, _ := t.encode(text, -1)
	return ids
}

// EncodeLimit is Encode for a text that may hold at most limit tokens. It
// returns false, and no ids, as soon as the text is known to hold more:
// before merging a piece too long to fit, and before the text's end. Its
// memory stays in proportion to limit and the text, whatever the text.
func (t *Tokenizer) EncodeLimit(text string, limit int) ([]int, bool) {
	if k := t.MaxBytesPerToken(); limit < 0 || (len(text)+k-1)/k > limit {
		return nil, false
	}
	return t.encode(text, limit)
}

// encode encodes text, giving up once it holds more than limit tokens
// (limit < 0: no limit).
func (t *Tokenizer) encode(text string, limit int) ([]int, bool) {
	n := len(text)/3 + 1
	if limit >= 0 {
		n = min(n, limit+1)
	}
	ids := make([]int, 0, n)
	start := 0
	for i := 0; i < len(text); {
		cands := t.addedFirst[text[i]]
		matched := -1
		for _, k := range cands {
			if strings.HasPrefix(text[i:], t.added[k].Content) {
				matched = k
				break
			}
		}
		if matched < 0 {
			i++
			continue
		}
		var ok bool
		if ids, ok = t.encodeText(text[start:i], ids, limit); !ok {
			return nil, false
		}
		ids = append(ids, t.added[matched].ID)
		if limit >= 0 && len(ids) > limit {
			return nil, false
		}
		i += len(t.added[matched].Content)
		start = i
	}
	ids, ok := t.encodeText(text[start:], ids, limit)
	if !ok || (limit >= 0 && len(ids) > limit) {
		return nil, false
	}
	return ids, true
}

// encodeText encodes text that holds no added token, giving up once ids
// hold more than limit tokens (limit < 0: no limit).
func (t *Tokenizer) encodeText(text string, ids []int, limit int) ([]int, bool) {
	if text == "" {
		return ids, true
	}
	if t.nfc {
		text = nfc(text)
	}
	for i := 0; i < len(text); {
		n := t.split.piece(text, i)
		// Give up before merging a piece that cannot fit.
		if limit >= 0 && len(ids)+t.minTokens(text[i:i+n]) > limit {
			return ids, false
		}
		ids = t.encodePiece(text[i:i+n], ids)
		i += n
		if limit >= 0 && len(ids) > limit {
			return ids, false
		}
	}
	return ids, true
}

// NFC normalization shortens UTF-8 text at most by the factor
// nfcShrinkNum/nfcShrinkDen: U+212A KELVIN SIGN (3 bytes) becomes K (1),
// and TestNFCShrinkBound derives 3.5 as a bound from the tables.
const nfcShrinkNum, nfcShrinkDen = 7, 2

// MaxBytesPerToken bounds the bytes of text that one token of Encode
// stands for, so a text of n bytes holds at least
// ceil(n / MaxBytesPerToken()) tokens: the longest token, widened by how
// much NFC normalization (where the tokenizer applies it) can shorten text.
func (t *Tokenizer) MaxBytesPerToken() int {
	n := t.longestToken()
	if t.nfc {
		n = (n*nfcShrinkNum + nfcShrinkDen - 1) / nfcShrinkDen
	}
	for _, a := range t.added {
		n = max(n, len(a.Content))
	}
	return n
}

// longestToken is the length in bytes of the longest token merging can
// produce.
func (t *Tokenizer) longestToken() int {
	t.indexLongest()
	return t.longestLen
}

// minTokens is a lower bound on the tokens of a piece: a token that
// begins with byte b is at most longestFrom[b] bytes long, so the piece
// splits into no fewer tokens than the fewest such jumps that cross it.
func (t *Tokenizer) minTokens(piece string) int {
	t.indexLongest()
	jumps, end, reach := 0, 0, 0
	for i := 0; i < len(piece); i++ {
		reach = max(reach, i+int(t.longestFrom[piece[i]]))
		if i == end {
			jumps++
			end = reach
		}
	}
	return jumps
}

// indexLongest measures the vocabulary's tokens (those merging produces;
// an added token comes only from matching its text).
func (t *Tokenizer) indexLongest() {
	t.longest.Do(func() {
		for _, id := range t.vocab {
			raw := t.tokenRaw[id]
			if len(raw) == 0 {
				continue
			}
			t.longestLen = max(t.longestLen, len(raw))
			t.longestFrom[raw[0]] = max(t.longestFrom[raw[0]], int32(len(raw)))
		}
		for b := range t.longestFrom {
			t.longestFrom[b] = max(t.longestFrom[b], 1)
		}
		t.longestLen = max(t.longestLen, 1)
	})
}

// DecodeBytes returns the bytes ids stand for, each added token as its
// content. Unknown ids are skipped, as Hugging Face does. Streaming callers
// use it to hold back a multi-byte character split across tokens.
func (t *Tokenizer) DecodeBytes(ids []int) []byte {
	var out []byte
	for _, id := range ids {
		if id >= 0 && id < len(t.tokenRaw) {
			out = append(out, t.tokenRaw[id]...)
		}
	}
	return out
}

// Decode returns the text ids stand for, special tokens included. Bytes
// that are not valid UTF-8 (a character cut between tokens) become U+FFFD,
// one per maximal invalid subsequence, as Rust's from_utf8_lossy does.
func (t *Tokenizer) Decode(ids []int) string {
	return lossyUTF8(t.DecodeBytes(ids))
}

func lossyUTF8(b []byte) string {
	if utf8.Valid(b) {
		return string(b)
	}
	var sb strings.Builder
	sb.Grow(len(b) + 8)
	for len(b) > 0 {
		r, n := utf8.DecodeRune(b)
		if r != utf8.RuneError || n > 1 {
			sb.Write(b[:n])
			b = b[n:]
			continue
		}
		sb.WriteRune(utf8.RuneError)
		b = b[invalidPrefix(b):]
	}
	return sb.String()
}

// invalidPrefix returns the length of the maximal subpart of an ill-formed
// UTF-8 sequence at the start of b (Unicode §3.9, "U+FFFD substitution of
// maximal subparts"): a lead byte followed by as many continuation bytes as
// could still begin a valid sequence, at least 1.
func invalidPrefix(b []byte) int {
	lo, hi := byte(0x80), byte(0xBF)
	var need int
	switch c := b[0]; {
	case c >= 0xC2 && c <= 0xDF:
		need = 1
	case c == 0xE0:
		need, lo = 2, 0xA0
	case c == 0xED:
		need, hi = 2, 0x9F
	case c >= 0xE1 && c <= 0xEF:
		need = 2
	case c == 0xF0:
		need, lo = 3, 0x90
	case c == 0xF4:
		need, hi = 3, 0x8F
	case c >= 0xF1 && c <= 0xF3:
		need = 3
	default:
		return 1
	}
	n := 1
	for k := 0; k < need && n < len(b); k++ {
		if b[n] < lo || b[n] > hi {
			break
		}
		lo, hi = 0x80, 0xBF
		n++
	}
	return n
}

// indexAdded builds the lookup tables for added tokens; added must be
// sorted by id.
func (t *Tokenizer) indexAdded() {
	t.addedByText = make(map[string]int, len(t.added))
	t.addedByID = make(map[int]int, len(t.added))
	t.addedFirst = [256][]int{}
	for k, a := range t.added {
		t.addedByText[a.Content] = a.ID
		t.addedByID[a.ID] = k
		t.addedFirst[a.Content[0]] = append(t.addedFirst[a.Content[0]], k)
	}
	for b := range t.addedFirst {
		c := t.addedFirst[b]
		// Longest first: the leftmost match is the longest one there.
		sort.SliceStable(c, func(i, j int) bool { return len(t.added[c[i]].Content) > len(t.added[c[j]].Content) })
	}
}
