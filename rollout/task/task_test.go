package task

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/rlnode/rlnode/rollout/verify"
)

func gen(t *testing.T, cfg Config, split Split, n int) []Problem {
	t.Helper()
	g, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ps, err := g.Generate(split, n)
	if err != nil {
		t.Fatal(err)
	}
	return ps
}

func TestDeterministic(t *testing.T) {
	a := gen(t, Config{Seed: 7}, Train, 200)
	b := gen(t, Config{Seed: 7}, Train, 200)
	c := gen(t, Config{Seed: 8}, Train, 200)
	same := 0
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("problem %d differs for the same seed: %+v vs %+v", i, a[i], b[i])
		}
		if a[i].Question == c[i].Question {
			same++
		}
	}
	if same > len(a)/4 {
		t.Fatalf("seeds 7 and 8 share %d of %d questions", same, len(a))
	}
	// Random access gives the same problem as the batch.
	g, _ := New(Config{Seed: 7})
	if p, err := g.Problem(Train, 123); err != nil || p != a[123] {
		t.Fatalf("Problem(123) = %+v, %v; want %+v", p, err, a[123])
	}
}

func TestSplitsDisjoint(t *testing.T) {
	for _, level := range []int{0, 1, 3, 5} {
		t.Run(fmt.Sprint("level ", level), func(t *testing.T) {
			train := map[string]bool{}
			for _, seed := range []uint64{1, 2} {
				for _, p := range gen(t, Config{Seed: seed, Level: level}, Train, 3000) {
					train[p.Question] = true
					if SplitOf(p.Question, 10) != Train {
						t.Fatalf("%s is not a train question", p.Question)
					}
				}
			}
			heldOut := map[string]bool{}
			for _, p := range gen(t, Config{Seed: 3, Level: level}, HeldOut, 3000) {
				heldOut[p.Question] = true
				if train[p.Question] {
					t.Fatalf("held-out question %q is also in train", p.Question)
				}
			}
			t.Logf("level %d: %d distinct train and %d distinct held-out questions", level, len(train), len(heldOut))
			if len(heldOut) < 100 {
				t.Fatalf("only %d distinct held-out questions", len(heldOut))
			}
		})
	}
}

func TestConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{Kinds: []string{"calculus"}}, `task kind "calculus"`},
		{Config{Level: 6}, "task level 6"},
		{Config{Level: -1}, "task level -1"},
		{Config{HeldOutPercent: 100}, "held-out percent 100"},
	} {
		if _, err := New(tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%+v) = %v, want error containing %q", tc.cfg, err, tc.want)
		}
	}
	g, _ := New(Config{})
	if _, err := g.Problem(Train, -1); err == nil {
		t.Error("Problem(-1) did not fail")
	}
}

var (
	whatIsRE     = regexp.MustCompile(`^What is (.+)\?( Give the answer as a fraction in lowest terms\.)?$`)
	linearRE     = regexp.MustCompile(`^Solve for x: (.+) = (.+)\.$`)
	sequenceRE   = regexp.MustCompile(`^What is the next number in the sequence (.+)\?$`)
	remainderRE  = regexp.MustCompile(`^What is the remainder when (\d+)(?: \* (\d+))? is divided by (\d+)\?$`)
	wordStartRE  = regexp.MustCompile(`^(\w+) has (\d+) (\w+)\.$`)
	wordStepRE   = regexp.MustCompile(`^(?:\w+ buys (\d+) more|\w+ finds (\d+) more|\w+ gives (\d+) to [\w ]+|\w+ buys (\d+) bags with (\d+) \w+ each|Then the number of \w+ \w+ has doubles|\w+ shares them equally with (\d+) friends and keeps one share)\.$`)
	wordQuestion = regexp.MustCompile(`^How many (\w+) does (\w+) have now\?$`)
)

// solve works a problem out from its text alone, independently of the
// generator, and returns the answer it finds.
func solve(t *testing.T, p Problem) string {
	t.Helper()
	atoi := func(s string) int {
		n, err := strconv.Atoi(s)
		if err != nil {
			t.Fatalf("%s: %q: %v", p.ID, s, err)
		}
		return n
	}
	switch p.Kind {
	case Arithmetic, Fraction:
		m := whatIsRE.FindStringSubmatch(p.Question)
		if m == nil {
			t.Fatalf("%s: unexpected question %q", p.ID, p.Question)
		}
		return m[1] // compared with verify.Equivalent below
	case Linear:
		m := linearRE.FindStringSubmatch(p.Question)
		if m == nil {
			t.Fatalf("%s: unexpected question %q", p.ID, p.Question)
		}
		// The answer solves the equation when lhs - rhs is 0 there.
		sub := func(s string) string { return strings.ReplaceAll(s, "x", "("+p.Answer+")") }
		if !verify.Equivalent("("+sub(m[1])+")-("+sub(m[2])+")", "0") {
			t.Errorf("%s: x = %s does not solve %q", p.ID, p.Answer, p.Question)
		}
		return p.Answer
	case Sequence:
		m := sequenceRE.FindStringSubmatch(p.Question)
		var s []int
		for _, f := range strings.Split(m[1], ", ") {
			s = append(s, atoi(f))
		}
		n := len(s)
		switch {
		case p.Level <= 2: // arithmetic
			return strconv.Itoa(s[n-1] + s[1] - s[0])
		case p.Level == 3: // geometric
			return strconv.Itoa(s[n-1] * (s[1] / s[0]))
		case p.Level == 4: // constant second difference
			d1, d2 := s[n-1]-s[n-2], (s[n-1]-s[n-2])-(s[n-2]-s[n-3])
			return strconv.Itoa(s[n-1] + d1 + d2)
		default: // each term the sum of the two before
			return strconv.Itoa(s[n-1] + s[n-2])
		}
	case Remainder:
		m := remainderRE.FindStringSubmatch(p.Question)
		n := atoi(m[1])
		if m[2] != "" {
			n *= atoi(m[2])
		}
		return strconv.Itoa(n % atoi(m[3]))
	case Word:
		sentences := regexp.MustCompile(`(?:[.?])( |$)`).Split(p.Question, -1)
		var c int
		for i, s := range sentences {
			if s == "" {
				continue
			}
			switch {
			case i == 0:
				m := wordStartRE.FindStringSubmatch(s + ".")
				if m == nil {
					t.Fatalf("%s: start %q", p.ID, s)
				}
				c = atoi(m[2])
			case wordQuestion.MatchString(s + "?"):
			default:
				m := wordStepRE.FindStringSubmatch(s + ".")
				switch {
				case m == nil:
					t.Fatalf("%s: step %q not understood", p.ID, s)
				case m[1] != "":
					c += atoi(m[1])
				case m[2] != "":
					c += atoi(m[2])
				case m[3] != "":
					c -= atoi(m[3])
				case m[4] != "":
					c += atoi(m[4]) * atoi(m[5])
				case m[6] != "":
					if c%(atoi(m[6])+1) != 0 {
						t.Errorf("%s: %d cannot be shared among %s", p.ID, c, m[6])
					}
					c /= atoi(m[6]) + 1
				default:
					c *= 2
				}
				if c < 0 {
					t.Errorf("%s: count went negative", p.ID)
				}
			}
		}
		return strconv.Itoa(c)
	}
	t.Fatalf("unknown kind %q", p.Kind)
	return ""
}

func TestAnswersAreRight(t *testing.T) {
	ctx := context.Background()
	math := verify.Math{}
	for _, kind := range Kinds {
		for level := 1; level <= MaxLevel; level++ {
			for _, split := range []Split{Train, HeldOut} {
				for _, p := range gen(t, Config{Seed: 11, Kinds: []string{kind}, Level: level}, split, 150) {
					if p.Kind != kind || p.Level != level {
						t.Fatalf("%s: kind %s level %d", p.ID, p.Kind, p.Level)
					}
					if len(p.Answer) > 7 {
						t.Errorf("%s: answer %q is long", p.ID, p.Answer)
					}
					if want := solve(t, p); !verify.Equivalent(want, p.Answer) {
						t.Errorf("%s: %q: answer %q, worked out %q", p.ID, p.Question, p.Answer, want)
					}
					if kind == Fraction {
						var n, d int64
						if _, err := fmt.Sscanf(p.Answer, "%d/%d", &n, &d); err == nil && (d <= 1 || gcd(n, d) != 1) {
							t.Errorf("%s: %s is not in lowest terms", p.ID, p.Answer)
						}
					}
					ref := verify.Reference{Answer: p.Answer}
					if r := math.Verify(ctx, `so \boxed{`+p.Answer+`}`, ref); r.Reward != 1 {
						t.Errorf("%s: boxed answer scored %+v", p.ID, r)
					}
					if r := math.Verify(ctx, "The answer is "+p.Answer+".", ref); r.Reward != 1 {
						t.Errorf("%s: stated answer scored %+v", p.ID, r)
					}
					if n, err := strconv.Atoi(p.Answer); err == nil {
						if r := math.Verify(ctx, `\boxed{`+strconv.Itoa(n+1)+`}`, ref); r.Reward != 0 {
							t.Errorf("%s: wrong answer %d scored %+v", p.ID, n+1, r)
						}
					}
				}
			}
		}
	}
}

// BenchmarkGenerate measures problems generated per second (all kinds,
// all levels).
func BenchmarkGenerate(b *testing.B) {
	g, err := New(Config{Seed: 1})
	if err != nil {
		b.Fatal(err)
	}
	i := 0
	for b.Loop() {
		if _, err := g.Problem(Train, i); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

// TestLevel1ArithmeticSpace checks level-1 arithmetic: two operands in
// 1..level1MaxOperand joined by + or −, never negative, and a question
// space large enough that a held-out split of a few hundred questions
// tests the rule rather than recall.
func TestLevel1ArithmeticSpace(t *testing.T) {
	re := regexp.MustCompile(`^What is (\d+) ([+-]) (\d+)\?$`)
	atoi := func(s string) int {
		n, err := strconv.Atoi(s)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	for _, split := range []Split{Train, HeldOut} {
		distinct := map[string]bool{}
		for _, p := range gen(t, Config{Seed: 5, Kinds: []string{Arithmetic}, Level: 1, HeldOutPercent: 30}, split, 3000) {
			m := re.FindStringSubmatch(p.Question)
			if m == nil {
				t.Fatalf("%s: %q is not a level-1 question", p.ID, p.Question)
			}
			a, b := atoi(m[1]), atoi(m[3])
			if a < 1 || b < 1 || a > level1MaxOperand || b > level1MaxOperand {
				t.Fatalf("%s: %q: operand outside 1..%d", p.ID, p.Question, level1MaxOperand)
			}
			if n := atoi(p.Answer); n < 0 {
				t.Fatalf("%s: %q: negative answer %d", p.ID, p.Question, n)
			}
			distinct[p.Question] = true
		}
		t.Logf("%s: %d distinct level-1 questions in 3000", split, len(distinct))
		if len(distinct) < 200 {
			t.Errorf("%s: only %d distinct level-1 questions in 3000", split, len(distinct))
		}
	}
}
