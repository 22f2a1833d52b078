package simlm

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// node is an arithmetic expression tree: a number, or op over l and r.
type node struct {
	op   byte // 0 for a number; + - * /
	n    int64
	l, r *node
}

// step is one binary operation of a solution, in the order it is done;
// left and right are step indexes (-1: the literal in lv/rv).
type step struct {
	op     byte
	left   int
	right  int
	lv, rv int64
}

// problem is a question the model understood: its steps, and the whole
// computation as one expression.
type problem struct {
	steps   []step
	expr    string // Python/calculator syntax, // for division
	written string // an arithmetic question's expression as written
	word    bool
}

var (
	startRE = regexp.MustCompile(`^\s*[A-Z][a-z]+ has (\d+) [a-z]+\.`)
	bagsRE  = regexp.MustCompile(`buys (\d+) bags with (\d+) `)
	buysRE  = regexp.MustCompile(`buys (\d+) more`)
	findsRE = regexp.MustCompile(`finds (\d+) more`)
	givesRE = regexp.MustCompile(`gives (\d+) to`)
	shareRE = regexp.MustCompile(`shares them equally with (\d+) friends`)
	whatRE  = regexp.MustCompile(`^\s*What is (.+)\?\s*$`)
)

// parseProblem reads the built-in word problems and arithmetic questions
// (rollout/task's word and arithmetic kinds).
func parseProblem(q string) (*problem, error) {
	if m := whatRE.FindStringSubmatch(q); m != nil {
		p := &exprParser{s: m[1]}
		t, err := p.sum()
		if err != nil {
			return nil, err
		}
		if p.skip(); p.i != len(p.s) {
			return nil, fmt.Errorf("unexpected %q", p.s[p.i:])
		}
		pr := &problem{expr: render(t), written: strings.TrimSpace(m[1])}
		flatten(t, &pr.steps)
		return pr, nil
	}
	m := startRE.FindStringSubmatch(q)
	if m == nil {
		return nil, fmt.Errorf("not a word problem this model reads")
	}
	start, _ := strconv.ParseInt(m[1], 10, 64)
	cur := &node{n: start}
	rest := q[len(m[0]):]
	for _, sent := range strings.Split(rest, ".") {
		switch {
		case bagsRE.MatchString(sent):
			b := bagsRE.FindStringSubmatch(sent)
			cur = &node{op: '+', l: cur, r: &node{op: '*', l: num(b[1]), r: num(b[2])}}
		case buysRE.MatchString(sent):
			cur = &node{op: '+', l: cur, r: num(buysRE.FindStringSubmatch(sent)[1])}
		case findsRE.MatchString(sent):
			cur = &node{op: '+', l: cur, r: num(findsRE.FindStringSubmatch(sent)[1])}
		case givesRE.MatchString(sent):
			cur = &node{op: '-', l: cur, r: num(givesRE.FindStringSubmatch(sent)[1])}
		case strings.Contains(sent, "doubles"):
			cur = &node{op: '*', l: cur, r: &node{n: 2}}
		case shareRE.MatchString(sent):
			f, _ := strconv.ParseInt(shareRE.FindStringSubmatch(sent)[1], 10, 64)
			cur = &node{op: '/', l: cur, r: &node{n: f + 1}}
		}
	}
	pr := &problem{expr: render(cur), word: true}
	flatten(cur, &pr.steps)
	if len(pr.steps) == 0 {
		return nil, fmt.Errorf("no steps found")
	}
	return pr, nil
}

func num(s string) *node {
	n, _ := strconv.ParseInt(s, 10, 64)
	return &node{n: n}
}

// flatten appends t's operations in evaluation order and returns t's step
// index (-1 for a number).
func flatten(t *node, out *[]step) int {
	if t.op == 0 {
		return -1
	}
	l, r := flatten(t.l, out), flatten(t.r, out)
	*out = append(*out, step{op: t.op, left: l, right: r, lv: t.l.n, rv: t.r.n})
	return len(*out) - 1
}

func render(t *node) string {
	if t.op == 0 {
		return strconv.FormatInt(t.n, 10)
	}
	op := string(t.op)
	if t.op == '/' {
		op = "//"
	}
	return "(" + render(t.l) + " " + op + " " + render(t.r) + ")"
}

// exprParser parses + - * / with precedence, parentheses and integers.
type exprParser struct {
	s     string
	i     int
	depth int
}

func (p *exprParser) skip() {
	for p.i < len(p.s) && p.s[p.i] == ' ' {
		p.i++
	}
}

func (p *exprParser) sum() (*node, error) {
	l, err := p.product()
	for err == nil {
		if p.skip(); p.i < len(p.s) && (p.s[p.i] == '+' || p.s[p.i] == '-') {
			op := p.s[p.i]
			p.i++
			var r *node
			if r, err = p.product(); err == nil {
				l = &node{op: op, l: l, r: r}
			}
			continue
		}
		return l, nil
	}
	return nil, err
}

func (p *exprParser) product() (*node, error) {
	l, err := p.atom()
	for err == nil {
		if p.skip(); p.i < len(p.s) && (p.s[p.i] == '*' || p.s[p.i] == '/') {
			op := p.s[p.i]
			p.i++
			var r *node
			if r, err = p.atom(); err == nil {
				l = &node{op: op, l: l, r: r}
			}
			continue
		}
		return l, nil
	}
	return nil, err
}

func (p *exprParser) atom() (*node, error) {
	if p.skip(); p.i >= len(p.s) {
		return nil, fmt.Errorf("expression ends early")
	}
	if p.s[p.i] == '(' {
		if p.depth++; p.depth > 32 {
			return nil, fmt.Errorf("nested too deep")
		}
		p.i++
		t, err := p.sum()
		if err != nil {
			return nil, err
		}
		if p.skip(); p.i >= len(p.s) || p.s[p.i] != ')' {
			return nil, fmt.Errorf("missing )")
		}
		p.i++
		p.depth--
		return t, nil
	}
	j := p.i
	if j < len(p.s) && p.s[j] == '-' {
		j++
	}
	for j < len(p.s) && p.s[j] >= '0' && p.s[j] <= '9' {
		j++
	}
	n, err := strconv.ParseInt(p.s[p.i:j], 10, 64)
	if err != nil {
		return nil, fmt.Errorf("bad number at %q", p.s[p.i:])
	}
	p.i = j
	return &node{n: n}, nil
}

// apply computes a op b exactly.
func apply(op byte, a, b int64) int64 {
	switch op {
	case '+':
		return a + b
	case '-':
		return a - b
	case '*':
		return a * b
	case '/':
		if b == 0 {
			return 0
		}
		return a / b
	}
	return 0
}

func digits(v int64) int {
	if v < 0 {
		v = -v
	}
	return len(strconv.FormatInt(v, 10))
}

// difficulty is the chance of getting a op b wrong in one's head.
func difficulty(op byte, a, b int64) float64 {
	pick := func(table []float64, d int) float64 { return table[min(max(d, 1), len(table))-1] }
	switch op {
	case '+', '-':
		return pick([]float64{0.01, 0.04, 0.12, 0.22, 0.32}, max(digits(a), digits(b), digits(apply(op, a, b))))
	case '*':
		return pick([]float64{0.01, 0.03, 0.12, 0.30, 0.45, 0.6}, digits(a)+digits(b)-1)
	case '/':
		return pick([]float64{0.02, 0.08, 0.2, 0.35}, digits(a))
	}
	return 0
}

func opString(op byte) string { return string(op) }
