package tokenizer

import (
	"fmt"
	"strings"
)

// Train learns a byte-level BPE tokenizer from corpus: the 256 byte tokens
// (id = byte value), then merges of the most frequent adjacent pair within
// the pieces of Qwen2's split pattern, then specials as added tokens. vocabSize
// counts all three. Training stops early when no pair occurs twice. Ties
// between equally frequent pairs go to the pair with the smaller ids, so the
// result depends only on the corpus.
func Train(corpus []string, vocabSize int, specials []string) (*Tokenizer, error) {
	seen := make(map[string]bool, len(specials))
	for i, s := range specials {
		if s == "" {
			return nil, fmt.Errorf("tokenizer: train: specials[%d] is empty", i)
		}
		if seen[s] {
			return nil, fmt.Errorf("tokenizer: train: specials[%d] %q is repeated", i, s)
		}
		seen[s] = true
	}
	numMerges := vocabSize - 256 - len(specials)
	if numMerges < 0 {
		return nil, fmt.Errorf("tokenizer: train: vocabSize %d is below 256 byte tokens + %d specials", vocabSize, len(specials))
	}

	tr := newTrainer(corpus, specials)
	tr.run(numMerges)

	t := &Tokenizer{
		split:            splitQwen2,
		rawPreTokenizer:  qwen2PreTokenizer,
		rawPostProcessor: byteLevelSection,
		rawDecoder:       byteLevelSection,
	}
	n := len(tr.tokens) + len(specials)
	t.vocab = make(map[string]int32, len(tr.tokens))
	t.tokens = make([]string, n)
	t.tokenRaw = make([][]byte, n)
	for id, tok := range tr.tokens {
		t.vocab[tok] = int32(id)
		t.setToken(id, tok, true)
	}
	for b := 0; b < 256; b++ {
		t.byteIDs[b] = int32(b)
	}
	t.merges = make(map[uint64]merge, len(tr.merges))
	for _, m := range tr.merges {
		if err := t.addMerge(tr.tokens[m[0]], tr.tokens[m[1]]); err != nil {
			return nil, fmt.Errorf("tokenizer: train: %w", err) // a trainer bug
		}
	}
	for i, s := range specials {
		id := len(tr.tokens) + i
		t.setToken(id, s, true)
		t.added = append(t.added, AddedToken{ID: id, Content: s, Special: true})
	}
	t.indexAdded()
	return t, nil
}

// trainWord is one distinct piece of the corpus as its current tokens.
type trainWord struct {
	syms  []int32
	count int
}

type trainer struct {
	words  []trainWord
	tokens []string // id → byte-level spelling
	ids    map[string]int32
	merges [][2]int32
	pairs  map[uint64]int          // pair → occurrences in the corpus
	where  map[uint64]map[int]bool // pair → words that held it (may be stale)
}

func newTrainer(corpus []string, specials []string) *trainer {
	counts := make(map[string]int)
	var order []string // first-seen order keeps word indices deterministic
	for _, doc := range corpus {
		for _, part := range splitOnSpecials(doc, specials) {
			for _, p := range splitQwen2.split(part) {
				if counts[p] == 0 {
					order = append(order, p)
				}
				counts[p]++
			}
		}
	}
	tr := &trainer{
		ids:   make(map[string]int32),
		pairs: make(map[uint64]int),
		where: make(map[uint64]map[int]bool),
	}
	for b := 0; b < 256; b++ {
		tok := string(byteToRune[b])
		tr.tokens = append(tr.tokens, tok)
		tr.ids[tok] = int32(b)
	}
	for _, p := range order {
		w := trainWord{syms: make([]int32, len(p)), count: counts[p]}
		for i := 0; i < len(p); i++ {
			w.syms[i] = int32(p[i])
		}
		tr.words = append(tr.words, w)
	}
	for i := range tr.words {
		tr.countPairs(i, +1)
	}
	return tr
}

func splitOnSpecials(doc string, specials []string) []string {
	parts := []string{doc}
	for _, s := range specials {
		var next []string
		for _, p := range parts {
			next = append(next, strings.Split(p, s)...)
		}
		parts = next
	}
	return parts
}

// countPairs adds (sign +1) or removes (sign -1) word i's pairs.
func (tr *trainer) countPairs(i, sign int) {
	w := tr.words[i]
	for j := 0; j+1 < len(w.syms); j++ {
		k := pairKey(w.syms[j], w.syms[j+1])
		tr.pairs[k] += sign * w.count
		if tr.pairs[k] == 0 {
			delete(tr.pairs, k)
		}
		if sign > 0 {
			set := tr.where[k]
			if set == nil {
				set = make(map[int]bool)
				tr.where[k] = set
			}
			set[i] = true
		}
	}
}

func (tr *trainer) best() (uint64, int) {
	var bestKey uint64
	bestCount := 0
	for k, c := range tr.pairs {
		if c > bestCount || (c == bestCount && k < bestKey) {
			bestKey, bestCount = k, c
		}
	}
	return bestKey, bestCount
}

func (tr *trainer) run(numMerges int) {
	for len(tr.merges) < numMerges {
		key, count := tr.best()
		if count < 2 {
			return
		}
		a, b := int32(key>>32), int32(uint32(key))
		spelling := tr.tokens[a] + tr.tokens[b]
		id, ok := tr.ids[spelling]
		if !ok {
			id = int32(len(tr.tokens))
			tr.tokens = append(tr.tokens, spelling)
			tr.ids[spelling] = id
		}
		tr.merges = append(tr.merges, [2]int32{a, b})
		affected := tr.where[key]
		delete(tr.where, key)
		for i := range affected { // words are independent: order is immaterial
			tr.countPairs(i, -1)
			tr.words[i].syms = applyMerge(tr.words[i].syms, a, b, id)
			tr.countPairs(i, +1)
		}
	}
}

// applyMerge replaces each non-overlapping a, b (left to right) with id.
func applyMerge(syms []int32, a, b, id int32) []int32 {
	out := syms[:0]
	for j := 0; j < len(syms); j++ {
		if j+1 < len(syms) && syms[j] == a && syms[j+1] == b {
			out = append(out, id)
			j++
			continue
		}
		out = append(out, syms[j])
	}
	return out
}
