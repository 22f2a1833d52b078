package ctxopt

import (
	"fmt"
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
//
// With a Source the features are the source's (the executor model's
// mean-pooled hidden states), L2 normalised, instead of the hashed bag.
type Embedder struct {
	Dim    int           // features; the observation has Dim+NumStats values
	Source FeatureSource // nil: hashed n-grams

	mu    sync.Mutex
	cache map[string][]float32
	err   error
}

// FeatureSource computes a text's features. Implementations must be safe
// for concurrent use.
type FeatureSource interface {
	Dim() int
	Features(texts []string) ([][]float32, error)
}

// NewEmbedder returns an embedder of dim hashed features.
func NewEmbedder(dim int) *Embedder { return &Embedder{Dim: dim, cache: map[string][]float32{}} }

// NewSourceEmbedder returns an embedder of src's features.
func NewSourceEmbedder(src FeatureSource) *Embedder {
	return &Embedder{Dim: src.Dim(), Source: src, cache: map[string][]float32{}}
}

// Err is the first error of the feature source; embeddings it failed on
// have zero features.
func (e *Embedder) Err() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.err
}

// Prepare computes and caches the embeddings of qs (in batches, for a
// source that batches) and returns the source's error, if any.
func (e *Embedder) Prepare(qs []Question) error {
	if e.Source == nil {
		return nil
	}
	var todo []string
	seen := map[string]bool{}
	e.mu.Lock()
	for _, q := range qs {
		t := clip(q.Text)
		if _, ok := e.cache[t]; !ok && !seen[t] {
			seen[t] = true
			todo = append(todo, t)
		}
	}
	e.mu.Unlock()
	for len(todo) > 0 {
		n := min(len(todo), 32)
		vs := e.fromSource(todo[:n])
		e.mu.Lock()
		for i, t := range todo[:n] {
			if len(e.cache) < maxCached {
				e.cache[t] = vs[i]
			}
		}
		e.mu.Unlock()
		todo = todo[n:]
	}
	return e.Err()
}

func clip(q string) string {
	if len(q) > maxEmbedBytes {
		return q[:maxEmbedBytes]
	}
	return q
}

// fromSource embeds texts with the source: normalised features, then the
// statistics. A failure leaves the features zero and is kept for Err.
func (e *Embedder) fromSource(texts []string) [][]float32 {
	fs, err := e.Source.Features(texts)
	if err == nil && len(fs) != len(texts) {
		err = fmt.Errorf("feature source: %d results for %d texts", len(fs), len(texts))
	}
	out := make([][]float32, len(texts))
	for i, t := range texts {
		v := make([]float32, e.Dim+NumStats)
		if err == nil {
			if len(fs[i]) != e.Dim {
				err = fmt.Errorf("feature source: %d features, want %d", len(fs[i]), e.Dim)
			} else {
				copy(v, fs[i])
				normalize(v[:e.Dim])
			}
		}
		copy(v[e.Dim:], Stats(t))
		out[i] = v
	}
	if err != nil {
		e.mu.Lock()
		if e.err == nil {
			e.err = err
		}
		e.mu.Unlock()
	}
	return out
}

func normalize(v []float32) {
	var norm float64
	for _, x := range v {
		norm += float64(x) * float64(x)
	}
	if norm > 0 {
		inv := float32(1 / math.Sqrt(norm))
		for i := range v {
			v[i] *= inv
		}
	}
}

// Size is the length of an embedding.
func (e *Embedder) Size() int { return e.Dim + NumStats }

var (
	wordRE   = regexp.MustCompile(`[A-Za-z]+|[0-9]+|[^\sA-Za-z0-9]`)
	numberRE = regexp.MustCompile(`[0-9]+`)
)

// Embed returns q's embedding; the caller must not modify it.
func (e *Embedder) Embed(q string) []float32 {
	q = clip(q)
	e.mu.Lock()
	v, ok := e.cache[q]
	e.mu.Unlock()
	if ok {
		return v
	}
	if e.Source != nil {
		v = e.fromSource([]string{q})[0]
	} else {
		v = e.compute(q)
	}
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
	normalize(v[:e.Dim])
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
