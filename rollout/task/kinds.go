package task

import (
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"strconv"
	"strings"
)

// maxAnswer keeps answers short: the small models trained here from
// scratch must be able to write them.
const maxAnswer = 99999

// level1MaxOperand bounds level-1 operands: a + b and a - b (a ≥ b) over
// 1..level1MaxOperand give 1,365 distinct questions, so a
// held-out split of a few hundred tests whether a model learned the rule
// rather than recalling the train questions (with 1..9, 126 questions in
// all, it could only recall).
const level1MaxOperand = 30

// arithmetic: levels 1-3 are flat expressions (+ and -; then * too),
// levels 4-5 random trees with parentheses and exact division.
func arithmetic(level int, rng *rand.Rand) (string, string) {
	type shape struct{ operands, maxN int }
	shapes := [...]shape{{2, level1MaxOperand}, {3, 50}, {3, 20}, {4, 30}, {5, 60}}
	sh := shapes[level-1]
	for {
		var t *arith
		if level <= 3 {
			ops := "+-"
			if level == 3 {
				ops = "+-*"
			}
			t = flatArith(rng, sh.operands, sh.maxN, ops)
		} else {
			ops := "+-*"
			if level == 5 {
				ops = "+-*/"
			}
			t = randomArith(rng, sh.operands, sh.maxN, ops)
		}
		v, ok := t.value()
		if !ok || v < 0 && level <= 2 || v > maxAnswer || v < -maxAnswer {
			continue
		}
		return "What is " + t.render(0, false) + "?", strconv.FormatInt(v, 10)
	}
}

// arith is an arithmetic expression tree.
type arith struct {
	op   byte // 0 for a number
	n    int64
	l, r *arith
}

func prec(op byte) int {
	switch op {
	case '+', '-':
		return 1
	case '*', '/':
		return 2
	}
	return 3
}

// value evaluates exactly; false on a division that leaves a remainder
// or by zero, or an intermediate result too large.
func (a *arith) value() (int64, bool) {
	if a.op == 0 {
		return a.n, true
	}
	l, ok1 := a.l.value()
	r, ok2 := a.r.value()
	if !ok1 || !ok2 {
		return 0, false
	}
	var v int64
	switch a.op {
	case '+':
		v = l + r
	case '-':
		v = l - r
	case '*':
		v = l * r
	case '/':
		if r == 0 || l%r != 0 {
			return 0, false
		}
		v = l / r
	}
	return v, v <= 1e9 && v >= -1e9
}

// render writes the tree with the parentheses precedence needs.
func (a *arith) render(parent int, right bool) string {
	if a.op == 0 {
		return strconv.FormatInt(a.n, 10)
	}
	p := prec(a.op)
	s := a.l.render(p, false) + " " + string(a.op) + " " + a.r.render(p, true)
	if p < parent || p == parent && right {
		return "(" + s + ")"
	}
	return s
}

// flatArith builds a1 op a2 op ... as written, left to right with * and /
// binding tighter: the tree a parser would build.
func flatArith(rng *rand.Rand, operands, maxN int, ops string) *arith {
	num := func() *arith { return &arith{n: int64(between(rng, 1, maxN))} }
	terms := []*arith{num()}
	var addOps []byte
	for range operands - 1 {
		switch op := ops[rng.IntN(len(ops))]; op {
		case '*':
			last := len(terms) - 1
			terms[last] = &arith{op: op, l: terms[last], r: &arith{n: int64(between(rng, 2, 12))}}
		default:
			addOps = append(addOps, op)
			terms = append(terms, num())
		}
	}
	t := terms[0]
	for i, op := range addOps {
		t = &arith{op: op, l: t, r: terms[i+1]}
	}
	return t
}

// randomArith builds a random tree over the given number of operands.
func randomArith(rng *rand.Rand, operands, maxN int, ops string) *arith {
	if operands == 1 {
		return &arith{n: int64(between(rng, 1, maxN))}
	}
	k := between(rng, 1, operands-1)
	op := ops[rng.IntN(len(ops))]
	return &arith{op: op, l: randomArith(rng, k, maxN, ops), r: randomArith(rng, operands-k, maxN, ops)}
}

var (
	names = []struct{ name, pronoun string }{
		{"Mia", "She"}, {"Leo", "He"}, {"Ava", "She"}, {"Sam", "He"}, {"Zoe", "She"},
		{"Max", "He"}, {"Lily", "She"}, {"Omar", "He"}, {"Nora", "She"}, {"Ivan", "He"},
	}
	items   = []string{"apples", "marbles", "stickers", "cards", "pencils", "coins", "books", "shells", "cookies", "stamps"}
	friends = []string{"a friend", "a cousin", "a neighbour", "the teacher", "a classmate", "a teammate"}
)

// wordProblem: a start amount and as many steps as the level (buy more,
// give away, buy bags of k, double, share equally), then "how many now".
func wordProblem(level int, rng *rand.Rand) (string, string) {
	maxN := []int{10, 15, 20, 30, 40}[level-1]
	who := names[rng.IntN(len(names))]
	item := items[rng.IntN(len(items))]
	for {
		c := between(rng, 2, maxN)
		var b strings.Builder
		fmt.Fprintf(&b, "%s has %d %s.", who.name, c, item)
		ok := true
		for range level {
			switch step := rng.IntN(5); {
			case step == 0:
				k := between(rng, 1, maxN)
				fmt.Fprintf(&b, " %s buys %d more.", who.pronoun, k)
				c += k
			case step == 1 && c > 1:
				k := between(rng, 1, c-1)
				fmt.Fprintf(&b, " %s gives %d to %s.", who.pronoun, k, friends[rng.IntN(len(friends))])
				c -= k
			case step == 2:
				m, k := between(rng, 2, 5), between(rng, 2, min(maxN, 12))
				fmt.Fprintf(&b, " %s buys %d bags with %d %s each.", who.pronoun, m, k, item)
				c += m * k
			case step == 3 && c <= 500:
				fmt.Fprintf(&b, " Then the number of %s %s has doubles.", item, strings.ToLower(who.pronoun))
				c *= 2
			case step == 4:
				m := between(rng, 2, 5)
				if c%m != 0 {
					ok = false
					break
				}
				fmt.Fprintf(&b, " %s shares them equally with %d friends and keeps one share.", who.pronoun, m-1)
				c /= m
			default:
				k := between(rng, 1, maxN)
				fmt.Fprintf(&b, " %s finds %d more.", who.pronoun, k)
				c += k
			}
			if !ok {
				break
			}
		}
		if !ok || c > maxAnswer {
			continue
		}
		fmt.Fprintf(&b, " How many %s does %s have now?", item, who.name)
		return b.String(), strconv.Itoa(c)
	}
}

// LinearTerm writes a*x with the sign folded in: "3x", "-x", "x".
func LinearTerm(a int) string {
	switch a {
	case 1:
		return "x"
	case -1:
		return "-x"
	}
	return strconv.Itoa(a) + "x"
}

// plus writes " + b" or " - |b|", nothing for 0.
func plus(b int) string {
	switch {
	case b > 0:
		return " + " + strconv.Itoa(b)
	case b < 0:
		return " - " + strconv.Itoa(-b)
	}
	return ""
}

// linear: solve for an integer x; x on both sides from level 4.
func linear(level int, rng *rand.Rand) (string, string) {
	for {
		var x, lhsA, lhsB, rhsA, rhsB int
		switch level {
		case 1:
			x, lhsA, lhsB = between(rng, 0, 10), 1, between(rng, 1, 10)
		case 2:
			x, lhsA, lhsB = between(rng, 0, 12), between(rng, 2, 9), between(rng, 0, 10)
		case 3:
			x, lhsA, lhsB = between(rng, -10, 10), between(rng, -9, 9), between(rng, -20, 20)
		default:
			span := 10 * (level - 2)
			x, lhsA, lhsB = between(rng, -span, span), between(rng, -9, 9), between(rng, -30, 30)
			rhsA, rhsB = between(rng, -9, 9), 0
		}
		if lhsA == 0 || lhsA == rhsA || level >= 4 && rhsA == 0 {
			continue
		}
		c := lhsA*x + lhsB - rhsA*x // rhs constant making x the solution
		rhsB = c
		lhs := LinearTerm(lhsA) + plus(lhsB)
		rhs := strconv.Itoa(rhsB)
		if level >= 4 {
			rhs = LinearTerm(rhsA) + plus(rhsB)
		}
		return fmt.Sprintf("Solve for x: %s = %s.", lhs, rhs), strconv.Itoa(x)
	}
}

// sequence: the next term of arithmetic (1-2), geometric (3), quadratic
// (4) and Fibonacci-like (5) sequences.
func sequence(level int, rng *rand.Rand) (string, string) {
	var terms []int
	shown := 4
	switch level {
	case 1:
		a, d := between(rng, 0, 20), between(rng, 1, 5)
		for i := range shown + 1 {
			terms = append(terms, a+i*d)
		}
	case 2:
		a, d := between(rng, -20, 50), between(rng, -12, 12)
		if d == 0 {
			d = 7
		}
		for i := range shown + 1 {
			terms = append(terms, a+i*d)
		}
	case 3:
		a, r := between(rng, 1, 9), between(rng, 2, 4)
		if rng.IntN(4) == 0 {
			r = -r
		}
		t := a
		for range shown + 1 {
			terms = append(terms, t)
			t *= r
		}
	case 4:
		a, b, c := between(rng, 1, 3), between(rng, -5, 5), between(rng, -10, 10)
		for n := 1; n <= shown+1; n++ {
			terms = append(terms, a*n*n+b*n+c)
		}
	default:
		shown = 5
		x, y := between(rng, 1, 9), between(rng, 1, 9)
		for range shown + 1 {
			terms = append(terms, x)
			x, y = y, x+y
		}
	}
	parts := make([]string, shown)
	for i := range shown {
		parts[i] = strconv.Itoa(terms[i])
	}
	return "What is the next number in the sequence " + strings.Join(parts, ", ") + "?", strconv.Itoa(terms[shown])
}

type frac struct{ n, d int64 }

func gcd(a, b int64) int64 {
	if a < 0 {
		a = -a
	}
	if b < 0 {
		b = -b
	}
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

func (f frac) reduce() frac {
	if f.d < 0 {
		f.n, f.d = -f.n, -f.d
	}
	g := gcd(f.n, f.d)
	if g == 0 {
		return frac{0, 1}
	}
	return frac{f.n / g, f.d / g}
}

func (f frac) String() string {
	if f.d == 1 {
		return strconv.FormatInt(f.n, 10)
	}
	return fmt.Sprintf("%d/%d", f.n, f.d)
}

func (f frac) apply(op byte, g frac) frac {
	switch op {
	case '+':
		return frac{f.n*g.d + g.n*f.d, f.d * g.d}.reduce()
	case '-':
		return frac{f.n*g.d - g.n*f.d, f.d * g.d}.reduce()
	case '*':
		return frac{f.n * g.n, f.d * g.d}.reduce()
	}
	return frac{f.n * g.d, f.d * g.n}.reduce() // '/'
}

// fraction: sums with a common denominator (1), unlike denominators (2),
// differences (3), products (4), and three fractions left to right with
// + - * (5). Answers are reduced fractions or integers.
func fraction(level int, rng *rand.Rand) (string, string) {
	pick := func(maxD int) frac {
		d := int64(between(rng, 2, maxD))
		return frac{int64(between(rng, 1, int(d)-1)), d}
	}
	for {
		q, a := fractionOnce(level, rng, pick)
		if len(a) <= 7 { // short answers only: redraw the rare long one
			return q, a
		}
	}
}

func fractionOnce(level int, rng *rand.Rand, pick func(int) frac) (string, string) {
	var fs []frac
	var ops []byte
	switch level {
	case 1:
		d := int64(between(rng, 3, 9))
		fs = []frac{{int64(between(rng, 1, int(d)-1)), d}, {int64(between(rng, 1, int(d)-1)), d}}
		ops = []byte{'+'}
	case 2:
		fs, ops = []frac{pick(9), pick(9)}, []byte{'+'}
	case 3:
		fs, ops = []frac{pick(10), pick(10)}, []byte{"+-"[rng.IntN(2)]}
	case 4:
		fs, ops = []frac{pick(12), pick(12)}, []byte{"+-*"[rng.IntN(3)]}
	default:
		fs, ops = []frac{pick(9), pick(9), pick(9)}, []byte{"+-*"[rng.IntN(3)], "+-"[rng.IntN(2)]}
	}
	v := fs[0]
	q := fs[0].String()
	for i, op := range ops {
		v = v.apply(op, fs[i+1])
		q += " " + string(op) + " " + fs[i+1].String()
	}
	return "What is " + q + "? Give the answer as a fraction in lowest terms.", v.String()
}

// remainder: n mod m with n growing with the level; level 5 asks for the
// remainder of a product.
func remainder(level int, rng *rand.Rand) (string, string) {
	m := between(rng, 2, []int{9, 12, 20, 30, 30}[level-1])
	if level == 5 {
		a, b := between(rng, 11, 99), between(rng, 11, 99)
		return fmt.Sprintf("What is the remainder when %d * %d is divided by %d?", a, b, m), strconv.Itoa(a * b % m)
	}
	n := between(rng, m+1, []int{50, 200, 1000, 10000}[level-1])
	return fmt.Sprintf("What is the remainder when %d is divided by %d?", n, m), strconv.Itoa(n % m)
}

// pick's candidates are two-digit numbers, pickMin..pickMax: every
// candidate sits at the same token offset, so a tiny model learns to copy
// the k-th one quickly.
const pickMin, pickMax = 10, 99

// pick: level+1 distinct candidates in pickMin..pickMax; the hint names
// the wanted one by position ("1st", "2nd", ...), drawn independently of
// the numbers, so nothing in the question tells which one it is.
func pick(level int, rng *rand.Rand) (question, answer, hint string) {
	n := level + 1
	seen := map[int]bool{}
	nums := make([]string, 0, n)
	vals := make([]int, 0, n)
	for len(nums) < n {
		v := between(rng, pickMin, pickMax)
		if seen[v] {
			continue
		}
		seen[v] = true
		vals = append(vals, v)
		nums = append(nums, strconv.Itoa(v))
	}
	k := rng.IntN(n)
	return "Pick: " + strings.Join(nums, " "), strconv.Itoa(vals[k]), Ordinal(k + 1)
}

// Ordinal writes 1 as "1st", 2 as "2nd", 3 as "3rd", 4 as "4th", ...
func Ordinal(k int) string {
	suffix := "th"
	switch {
	case k%100 >= 11 && k%100 <= 13:
	case k%10 == 1:
		suffix = "st"
	case k%10 == 2:
		suffix = "nd"
	case k%10 == 3:
		suffix = "rd"
	}
	return strconv.Itoa(k) + suffix
}

// AnyHint is a hint of p's form drawn independently of p's answer: for a
// pick problem, a position among its candidates chosen by a hash of the
// problem (uniform over the positions, so it names the hinted one by
// chance alone, 1 in level+1); "" for a problem of a kind without hints.
// It is what a feedback policy that ignores the hint would say, and makes
// a warm-up target that teaches the form of a hint and none of its
// content.
func AnyHint(p Problem) string {
	if p.Kind != Pick || p.Level < 1 {
		return ""
	}
	h := fnv.New64a()
	fmt.Fprintf(h, "%s\x00%s", p.ID, p.Question)
	return Ordinal(1 + int(mix(h.Sum64(), 0x5eed)%uint64(p.Level+1)))
}
