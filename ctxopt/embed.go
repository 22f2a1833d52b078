package ctxopt

import (
	"hash/fnv"
	"math"
	"regexp"
	"strconv"
	"strings"
	"sync"
)

// NumStats is the number of question statistics after the hashed features.
const NumStats = 5

// maxEmbedBytes bounds the text an embedding reads.
const maxEmbedBytes = 8 << 10

// maxCached bounds the embedding cache; past it, embeddings are computed
// and not kept.
const maxCached = 1 << 16

// Embedder turns a question into the policy's observation: a hashed bag of
// word unigrams, word bigrams and character trigrams (signed hashing, L2
// normalised) followed by NumStats statistics. Embeddings are cached per
// question text. Safe for concurrent use.
type Embedder struct {
	Dim int // hashed features; the observation has Dim+NumStats values

	mu    sync.Mutex
	cache map[string][]float32
}

// NewEmbedder returns an embedder of dim hashed features.
func NewEmbedder(dim int) *Embedder { return &Embedder{Dim: dim, cache: map[string][]float32{}} }

// Size is the length of an embedding.
func (e *Embedder) Size() int { return e.Dim + NumStats }

var (
	wordRE   = regexp.MustCompile(`[A-Za-z]+|[0-9]+|[^\sA-Za-z0-9]`)
	numberRE = regexp.MustCompile(`[0-9]+`)
)

// Embed returns q's embedding; the caller must not modify it.
func (e *Embedder) Embed(q string) []float32 {
	if len(q) > maxEmbedBytes {
		q = q[:maxEmbedBytes]
	}
	e.mu.Lock()
	v, ok := e.cache[q]
	e.mu.Unlock()
	if ok {
		return v
	}
	v = e.compute(q)
	e.mu.Lock()
	if len(e.cache) < maxCached {
		e.cache[q] = v
	}
	e.mu.Unlock()
	return v
}

func (e *Embedder) compute(q string) []float32 {
	v := make([]float32, e.Dim+NumStats)
	add := func(feature string) {
		h := fnv.New64a()
		h.Write([]byte(feature))
		s := h.Sum64()
		sign := float32(1)
		if s>>63 == 1 {
			sign = -1
		}
		v[int(s%uint64(e.Dim))] += sign
	}
	words := wordRE.FindAllString(strings.ToLower(q), -1)
	for i, w := range words {
		if numberRE.MatchString(w) {
			w = "<num" + strconv.Itoa(len(w)) + ">" // numbers by their digit count
		}
		words[i] = w
		add("w:" + w)
		if i > 0 {
			add("b:" + words[i-1] + " " + w)
		}
	}
	lower := strings.ToLower(q)
	for i := 0; i+3 <= len(lower); i++ {
		add("c:" + lower[i:i+3])
	}
	var norm float64
	for _, x := range v[:e.Dim] {
		norm += float64(x) * float64(x)
	}
	if norm > 0 {
		inv := float32(1 / math.Sqrt(norm))
		for i := range v[:e.Dim] {
			v[i] *= inv
		}
	}
	copy(v[e.Dim:], Stats(q))
	return v
}

// Stats are scaled question statistics: how many numbers, the log10 of
// the largest, the word count, the sentence count, and whether the
// question has a multiplication or division cue.
func Stats(q string) []float32 {
	nums := numberRE.FindAllString(q, -1)
	var maxDigits int
	for _, n := range nums {
		maxDigits = max(maxDigits, len(strings.TrimLeft(n, "0")))
	}
	words := len(strings.Fields(q))
	sentences := strings.Count(q, ".") + strings.Count(q, "?")
	lower := strings.ToLower(q)
	var mul float32
	if strings.ContainsAny(q, "*/") || strings.Contains(lower, "each") || strings.Contains(lower, "double") || strings.Contains(lower, "share") {
		mul = 1
	}
	return []float32{
		float32(len(nums)) / 8,
		float32(maxDigits) / 3,
		float32(words) / 40,
		float32(sentences) / 6,
		mul,
	}
}
