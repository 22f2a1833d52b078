// Package task generates synthetic problems with exactly verifiable short
// answers — arithmetic, multi-step word problems, linear equations,
// number sequences, fractions and remainders — at five difficulty levels,
// so every recipe runs with no downloads. Generation is deterministic by
// seed and random-access by index. The train and held-out splits never
// share a question: a question's split is a function of its text alone
// (the same for every seed), and each split only keeps its own questions.
//
// One kind, pick, is made for multi-turn (MLMT) training: its Problem
// carries a Hint the solver's prompt must not show. "Pick: 17 42 8" with
// hint "2nd" has the answer 42: the solver alone can only guess one of
// the candidates (1 in level+1), while a feedback policy that sees the
// hint can tell it which one — feedback carries information the solver
// lacks, so turn-3 accuracy above turn-1 accuracy measures the use of
// feedback. It is not among Kinds (a mixed generator never draws it).
//
// Answers are checked with the math verifier (package rollout/verify);
// this package owns no prompts or chat templates: recipes wrap Question.
package task

import (
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"slices"
)

// Kinds of problems.
const (
	Arithmetic = "arithmetic" // "What is 12 + 7 * 3?"
	Word       = "word"       // "Mia has 5 apples. She buys 3 bags with 4 apples each. ..."
	Linear     = "linear"     // "Solve for x: 3x + 5 = 20."
	Sequence   = "sequence"   // "What is the next number in the sequence 3, 7, 11, 15?"
	Fraction   = "fraction"   // "What is 1/2 + 1/3? Answer with a fraction in lowest terms."
	Remainder  = "remainder"  // "What is the remainder when 100 is divided by 7?"
	// Pick is the hidden-information kind: "Pick: 17 42 8", hint "2nd",
	// answer 42.
	Pick = "pick"
)

// Kinds lists every kind, in the order a mixed generator cycles through
// them.
var Kinds = []string{Arithmetic, Word, Linear, Sequence, Fraction, Remainder}

// HiddenKinds are the kinds whose problems carry a Hint for a feedback
// policy; they are asked for by name only.
var HiddenKinds = []string{Pick}

// AllKinds lists every kind New accepts.
func AllKinds() []string { return slices.Concat(Kinds, HiddenKinds) }

// MaxLevel is the hardest difficulty level; levels run from 1.
const MaxLevel = 5

// Split is a disjoint part of the problem space.
type Split int

// The splits.
const (
	Train Split = iota
	HeldOut
)

func (s Split) String() string {
	switch s {
	case Train:
		return "train"
	case HeldOut:
		return "held-out"
	}
	return fmt.Sprintf("Split(%d)", int(s))
}

// Problem is one generated problem.
type Problem struct {
	ID       string `json:"id"` // kind/level/split/index, e.g. "arithmetic/2/train/17"
	Kind     string `json:"kind"`
	Level    int    `json:"level"`
	Question string `json:"question"`
	Answer   string `json:"answer"` // an integer or a reduced fraction a/b
	// Hint is what only an MLMT feedback policy may see (HiddenKinds);
	// empty for the other kinds.
	Hint string `json:"hint,omitempty"`
}

// Config chooses what a Generator makes.
type Config struct {
	Seed  uint64
	Kinds []string // nil: all Kinds, cycled by index; HiddenKinds by name
	// Level is the difficulty, 1..MaxLevel; 0 spreads problems over all
	// levels, cycled by index.
	Level int
	// HeldOutPercent of the question space goes to the held-out split;
	// 0 means 10.
	HeldOutPercent int
}

// Generator makes problems. It holds no mutable state: safe for
// concurrent use.
type Generator struct {
	cfg Config
}

// New checks cfg and returns its generator.
func New(cfg Config) (*Generator, error) {
	if len(cfg.Kinds) == 0 {
		cfg.Kinds = Kinds
	}
	for _, k := range cfg.Kinds {
		if !slices.Contains(AllKinds(), k) {
			return nil, fmt.Errorf("task kind %q: want one of %v", k, AllKinds())
		}
	}
	if cfg.Level < 0 || cfg.Level > MaxLevel {
		return nil, fmt.Errorf("task level %d: want 1..%d, or 0 for all", cfg.Level, MaxLevel)
	}
	if cfg.HeldOutPercent == 0 {
		cfg.HeldOutPercent = 10
	}
	if cfg.HeldOutPercent < 1 || cfg.HeldOutPercent > 99 {
		return nil, fmt.Errorf("task held-out percent %d: want 1..99", cfg.HeldOutPercent)
	}
	cfg.Kinds = slices.Clone(cfg.Kinds)
	return &Generator{cfg: cfg}, nil
}

// SplitOf is the split a question belongs to under heldOutPercent: a hash
// of its text, independent of the seed.
func SplitOf(question string, heldOutPercent int) Split {
	h := fnv.New64a()
	h.Write([]byte(question))
	if int(h.Sum64()%100) < heldOutPercent {
		return HeldOut
	}
	return Train
}

// maxDraws bounds the search for a question of the asked split; every
// kind and level has thousands of questions, so hitting it means a
// configuration with a split that is (nearly) empty.
const maxDraws = 1 << 14

// Problem returns problem i of split: the same for the same seed, config,
// split and i. It fails only when no question of the split turns up in
// many draws.
func (g *Generator) Problem(split Split, i int) (Problem, error) {
	if i < 0 {
		return Problem{}, fmt.Errorf("task index %d is negative", i)
	}
	kind := g.cfg.Kinds[i%len(g.cfg.Kinds)]
	level := g.cfg.Level
	if level == 0 {
		level = 1 + (i/len(g.cfg.Kinds))%MaxLevel
	}
	// Draw candidates from a stream of this (seed, split, index) until one
	// falls in the split.
	for attempt := range uint64(maxDraws) {
		rng := rand.New(rand.NewPCG(mix(g.cfg.Seed, uint64(i)), mix(streamKey(kind, level, split), attempt)))
		q, a, hint := generate(kind, level, rng)
		if SplitOf(q, g.cfg.HeldOutPercent) == split {
			return Problem{ID: fmt.Sprintf("%s/%d/%s/%d", kind, level, split, i), Kind: kind, Level: level, Question: q, Answer: a, Hint: hint}, nil
		}
	}
	return Problem{}, fmt.Errorf("task %s level %d: no %s question in %d draws", kind, level, split, maxDraws)
}

// Generate returns problems 0..n-1 of split.
func (g *Generator) Generate(split Split, n int) ([]Problem, error) {
	out := make([]Problem, n)
	for i := range out {
		p, err := g.Problem(split, i)
		if err != nil {
			return nil, err
		}
		out[i] = p
	}
	return out, nil
}

func generate(kind string, level int, rng *rand.Rand) (question, answer, hint string) {
	if kind == Pick {
		return pick(level, rng)
	}
	q, a := generateVisible(kind, level, rng)
	return q, a, ""
}

func generateVisible(kind string, level int, rng *rand.Rand) (question, answer string) {
	switch kind {
	case Arithmetic:
		return arithmetic(level, rng)
	case Word:
		return wordProblem(level, rng)
	case Linear:
		return linear(level, rng)
	case Sequence:
		return sequence(level, rng)
	case Fraction:
		return fraction(level, rng)
	case Remainder:
		return remainder(level, rng)
	}
	panic("task: unknown kind " + kind) // New checked the kinds
}

// mix combines two words into a well-spread seed (splitmix64 finalizer),
// so neighbouring indexes get unrelated streams.
func mix(a, b uint64) uint64 {
	z := a ^ (b+0x9e3779b97f4a7c15)*0xbf58476d1ce4e5b9
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}

// streamKey names the stream of one kind, level and split.
func streamKey(kind string, level int, split Split) uint64 {
	h := fnv.New64a()
	fmt.Fprintf(h, "%s/%d/%d", kind, level, split)
	return h.Sum64()
}

// between returns a uniform integer in [lo, hi].
func between(rng *rand.Rand, lo, hi int) int { return lo + rng.IntN(hi-lo+1) }
