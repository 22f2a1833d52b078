package tokenizer

import "sync"

// merge is one BPE merge rule: the pair it joins has this rank (its index in
// model.merges; lower merges first) and yields token id result.
type merge struct {
	rank   int32
	result int32
}

func pairKey(left, right int32) uint64 { return uint64(uint32(left))<<32 | uint64(uint32(right)) }

// symbol is one token of a word during merging, in a doubly linked list over
// the word's bytes; a symbol absorbed by its left neighbour gets size 0.
type symbol struct {
	id         int32
	prev, next int32
	size       int32
}

// candidate is a pair (symbol at pos, its next) that a merge rule joins.
type candidate struct {
	rank   int32
	pos    int32
	result int32
}

func (a candidate) less(b candidate) bool {
	return a.rank < b.rank || (a.rank == b.rank && a.pos < b.pos)
}

// candidateHeap is a binary min-heap ordered by (rank, pos): the lowest-ranked
// pair merges first, the leftmost among equal ranks, as Hugging Face does.
type candidateHeap []candidate

func (h *candidateHeap) push(c candidate) {
	*h = append(*h, c)
	q := *h
	for i := len(q) - 1; i > 0; {
		p := (i - 1) / 2
		if !q[i].less(q[p]) {
			break
		}
		q[i], q[p] = q[p], q[i]
		i = p
	}
}

func (h *candidateHeap) pop() candidate {
	q := *h
	top := q[0]
	last := len(q) - 1
	q[0] = q[last]
	q = q[:last]
	for i := 0; ; {
		l, r, m := 2*i+1, 2*i+2, i
		if l < len(q) && q[l].less(q[m]) {
			m = l
		}
		if r < len(q) && q[r].less(q[m]) {
			m = r
		}
		if m == i {
			break
		}
		q[i], q[m] = q[m], q[i]
		i = m
	}
	*h = q
	return top
}

type mergeScratch struct {
	syms []symbol
	heap candidateHeap
}

var scratchPool = sync.Pool{New: func() any { return new(mergeScratch) }}

// bpeWord appends to ids the tokens of one pre-tokenized piece (raw bytes):
// each byte starts as its byte-level token and merge rules apply by rank.
func (t *Tokenizer) bpeWord(piece string, ids []int) []int {
	if len(piece) == 1 {
		return append(ids, int(t.byteIDs[piece[0]]))
	}
	sc := scratchPool.Get().(*mergeScratch)
	syms := sc.syms[:0]
	for i := 0; i < len(piece); i++ {
		syms = append(syms, symbol{id: t.byteIDs[piece[i]], prev: int32(i - 1), next: int32(i + 1), size: 1})
	}
	syms[len(syms)-1].next = -1
	h := sc.heap[:0]
	for i := 0; i+1 < len(syms); i++ {
		if m, ok := t.merges[pairKey(syms[i].id, syms[i+1].id)]; ok {
			h.push(candidate{rank: m.rank, pos: int32(i), result: m.result})
		}
	}
	for len(h) > 0 {
		c := h.pop()
		s := &syms[c.pos]
		if s.size == 0 || s.next < 0 {
			continue
		}
		right := &syms[s.next]
		// The pair may have changed since c was queued; only a current pair
		// whose rule is exactly c merges.
		if m, ok := t.merges[pairKey(s.id, right.id)]; !ok || m.rank != c.rank || m.result != c.result {
			continue
		}
		s.id = c.result
		s.size += right.size
		right.size = 0
		s.next = right.next
		if s.next >= 0 {
			syms[s.next].prev = c.pos
		}
		if s.prev >= 0 {
			if m, ok := t.merges[pairKey(syms[s.prev].id, s.id)]; ok {
				h.push(candidate{rank: m.rank, pos: s.prev, result: m.result})
			}
		}
		if s.next >= 0 {
			if m, ok := t.merges[pairKey(s.id, syms[s.next].id)]; ok {
				h.push(candidate{rank: m.rank, pos: c.pos, result: m.result})
			}
		}
	}
	for i := int32(0); i >= 0; i = syms[i].next {
		ids = append(ids, int(syms[i].id))
	}
	sc.syms, sc.heap = syms, h
	scratchPool.Put(sc)
	return ids
}

// wordCache remembers the tokens of recently seen pieces. Text repeats its
// words, so most pieces skip merging. It stops growing at capacity rather
// than evicting, as Hugging Face's cache does.
type wordCache struct {
	mu    sync.RWMutex
	words map[string][]int32
}

const (
	wordCacheCapacity = 1 << 15
	wordCacheMaxLen   = 64 // longer pieces are rare and not worth keeping
)

func (c *wordCache) get(piece string) ([]int32, bool) {
	c.mu.RLock()
	ids, ok := c.words[piece]
	c.mu.RUnlock()
	return ids, ok
}

func (c *wordCache) put(piece string, ids []int32) {
	c.mu.Lock()
	if c.words == nil {
		c.words = make(map[string][]int32)
	}
	if len(c.words) < wordCacheCapacity {
		c.words[piece] = ids
	}
	c.mu.Unlock()
}

// encodePiece appends the tokens of one pre-tokenized piece.
func (t *Tokenizer) encodePiece(piece string, ids []int) []int {
	if len(piece) == 1 {
		return append(ids, int(t.byteIDs[piece[0]]))
	}
	if t.ignoreMerges {
		// Llama-3 sets ignore_merges: a piece that is itself a vocabulary
		// token is emitted whole, even where merges would not reach it.
		if id, ok := t.rawVocab[piece]; ok {
			return append(ids, int(id))
		}
	}
	if len(piece) > wordCacheMaxLen {
		return t.bpeWord(piece, ids)
	}
	if cached, ok := t.cache.get(piece); ok {
		for _, id := range cached {
			ids = append(ids, int(id))
		}
		return ids
	}
	start := len(ids)
	ids = t.bpeWord(piece, ids)
	word := make([]int32, len(ids)-start)
	for i, id := range ids[start:] {
		word[i] = int32(id)
	}
	t.cache.put(piece, word)
	return ids
}
