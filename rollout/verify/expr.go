package verify

import (
	"errors"
	"fmt"
	"math"
	"math/big"
	"sort"
	"strconv"
	"strings"
)

// This file holds a small parser and evaluator for the LaTeX-flavoured
// arithmetic that math answers are written in: numbers, single-letter
// variables (x, y, x_1), + - * / ^, implicit multiplication (2x, 3\sqrt{2},
// 2(x+1)), \frac{a}{b} and \frac12, \sqrt{x} and \sqrt[n]{x}, \pi,
// \cdot, \times, \div, factorial and the usual functions. Expressions with
// variables are compared by evaluating both sides at the same points.

// maxExprDepth bounds the parser's recursion so a garbled answer such as
// "((((((..." is refused instead of exhausting the stack.
const maxExprDepth = 100

var errExprDepth = errors.New("expression nested too deeply")

// expr is a parsed expression node.
type expr struct {
	op   string // "num", "var", "+", "-", "*", "/", "^", "neg", "!", or a function name
	num  float64
	name string
	args []*expr
}

// eval computes the expression with the variables bound by env.
func (e *expr) eval(env map[string]float64) float64 {
	switch e.op {
	case "num":
		return e.num
	case "var":
		return env[e.name]
	case "neg":
		return -e.args[0].eval(env)
	case "+":
		return e.args[0].eval(env) + e.args[1].eval(env)
	case "-":
		return e.args[0].eval(env) - e.args[1].eval(env)
	case "*":
		return e.args[0].eval(env) * e.args[1].eval(env)
	case "/":
		return e.args[0].eval(env) / e.args[1].eval(env)
	case "^":
		return math.Pow(e.args[0].eval(env), e.args[1].eval(env))
	case "!":
		v := e.args[0].eval(env)
		if v < 0 || v != math.Trunc(v) || v > 170 {
			return math.NaN()
		}
		r := 1.0
		for i := 2.0; i <= v; i++ {
			r *= i
		}
		return r
	case "sqrt":
		return math.Sqrt(e.args[0].eval(env))
	case "root": // args: degree, radicand
		n, x := e.args[0].eval(env), e.args[1].eval(env)
		if x < 0 && n == math.Trunc(n) && int64(n)%2 == 1 {
			return -math.Pow(-x, 1/n)
		}
		return math.Pow(x, 1/n)
	case "sin":
		return math.Sin(e.args[0].eval(env))
	case "cos":
		return math.Cos(e.args[0].eval(env))
	case "tan":
		return math.Tan(e.args[0].eval(env))
	case "ln":
		return math.Log(e.args[0].eval(env))
	case "log": // base 10 unless a base was given as a second argument
		if len(e.args) == 2 {
			return math.Log(e.args[1].eval(env)) / math.Log(e.args[0].eval(env))
		}
		return math.Log10(e.args[0].eval(env))
	case "exp":
		return math.Exp(e.args[0].eval(env))
	case "abs":
		return math.Abs(e.args[0].eval(env))
	}
	return math.NaN()
}

// collectVars adds the names of the expression's variables to set.
func (e *expr) collectVars(set map[string]bool) {
	if e.op == "var" {
		set[e.name] = true
	}
	for _, a := range e.args {
		a.collectVars(set)
	}
}

// parseExpr parses a normalized answer (no spaces, no \left/\right) into an
// expression.
func parseExpr(s string) (*expr, error) {
	p := &exprParser{s: s}
	e, err := p.sum()
	if err != nil {
		return nil, err
	}
	if p.pos != len(p.s) {
		return nil, fmt.Errorf("unexpected %q at offset %d of %q", p.s[p.pos:p.pos+1], p.pos, s)
	}
	return e, nil
}

type exprParser struct {
	s     string
	pos   int
	depth int
}

func (p *exprParser) peek() byte {
	if p.pos < len(p.s) {
		return p.s[p.pos]
	}
	return 0
}

func (p *exprParser) enter() error {
	p.depth++
	if p.depth > maxExprDepth {
		return errExprDepth
	}
	return nil
}

func (p *exprParser) leave() { p.depth-- }

// command reads a backslash command name at pos without consuming it.
func (p *exprParser) command() string {
	if p.peek() != '\\' {
		return ""
	}
	i := p.pos + 1
	for i < len(p.s) && isLetter(p.s[i]) {
		i++
	}
	return p.s[p.pos+1 : i]
}

func isLetter(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }
func isDigit(c byte) bool  { return c >= '0' && c <= '9' }

// sum := product (('+'|'-') product)*
func (p *exprParser) sum() (*expr, error) {
	if err := p.enter(); err != nil {
		return nil, err
	}
	defer p.leave()
	left, err := p.product()
	if err != nil {
		return nil, err
	}
	for {
		c := p.peek()
		if c != '+' && c != '-' {
			return left, nil
		}
		p.pos++
		right, err := p.product()
		if err != nil {
			return nil, err
		}
		left = &expr{op: string(c), args: []*expr{left, right}}
	}
}

// product := unary (('*'|'/'|\cdot|\times|\div|implicit) unary)*
func (p *exprParser) product() (*expr, error) {
	left, err := p.unary()
	if err != nil {
		return nil, err
	}
	for {
		op := ""
		switch c := p.peek(); {
		case c == '*':
			op = "*"
			p.pos++
		case c == '/':
			op = "/"
			p.pos++
		case c == '\\':
			switch cmd := p.command(); cmd {
			case "cdot", "times", "ast":
				op = "*"
				p.pos += 1 + len(cmd)
			case "div":
				op = "/"
				p.pos += 1 + len(cmd)
			}
		}
		if op == "" {
			if !p.startsAtom() {
				return left, nil
			}
			op = "*" // implicit multiplication: 2x, 3\sqrt{2}, (a)(b)
		}
		right, err := p.unary()
		if err != nil {
			return nil, err
		}
		left = &expr{op: op, args: []*expr{left, right}}
	}
}

// startsAtom reports whether an atom (not an operator) begins at pos.
func (p *exprParser) startsAtom() bool {
	c := p.peek()
	switch {
	case isDigit(c), isLetter(c), c == '.', c == '(', c == '{', c == '[':
		return true
	case c == '\\':
		switch p.command() {
		case "cdot", "times", "ast", "div", "":
			return false
		}
		return true
	}
	return false
}

// unary := ('-'|'+') unary | power
func (p *exprParser) unary() (*expr, error) {
	if err := p.enter(); err != nil {
		return nil, err
	}
	defer p.leave()
	switch p.peek() {
	case '-':
		p.pos++
		e, err := p.unary()
		if err != nil {
			return nil, err
		}
		return &expr{op: "neg", args: []*expr{e}}, nil
	case '+':
		p.pos++
		return p.unary()
	}
	return p.power()
}

// power := postfix ('^' exponent)*, right-associative: a^b^c = a^(b^c).
func (p *exprParser) power() (*expr, error) {
	base, err := p.postfix()
	if err != nil {
		return nil, err
	}
	var exps []*expr
	for p.peek() == '^' {
		p.pos++
		sign := p.peek()
		if sign == '-' || sign == '+' { // x^-1: a signed one-token exponent
			p.pos++
		}
		var e *expr
		var err error
		if isDigit(p.peek()) {
			// 2^10 means 1024 in plain-text answers, though LaTeX
			// would render 2^1 0.
			e, err = p.atom()
		} else {
			e, err = p.argument()
		}
		if err != nil {
			return nil, err
		}
		if sign == '-' {
			e = &expr{op: "neg", args: []*expr{e}}
		}
		exps = append(exps, e)
	}
	if len(exps) == 0 {
		return base, nil
	}
	exp := exps[len(exps)-1]
	for i := len(exps) - 2; i >= 0; i-- {
		exp = &expr{op: "^", args: []*expr{exps[i], exp}}
	}
	return &expr{op: "^", args: []*expr{base, exp}}, nil
}

// postfix := atom '!'*
func (p *exprParser) postfix() (*expr, error) {
	e, err := p.atom()
	if err != nil {
		return nil, err
	}
	for p.peek() == '!' {
		p.pos++
		e = &expr{op: "!", args: []*expr{e}}
	}
	return e, nil
}

// argument is a LaTeX macro argument: {expr}, or one character (\frac12,
// x^2), or one command (\frac\pi2).
func (p *exprParser) argument() (*expr, error) {
	if err := p.enter(); err != nil {
		return nil, err
	}
	defer p.leave()
	c := p.peek()
	switch {
	case c == '{':
		p.pos++
		e, err := p.sum()
		if err != nil {
			return nil, err
		}
		if p.peek() != '}' {
			return nil, fmt.Errorf("missing } at offset %d of %q", p.pos, p.s)
		}
		p.pos++
		return e, nil
	case isDigit(c):
		p.pos++
		return &expr{op: "num", num: float64(c - '0')}, nil
	case isLetter(c), c == '\\':
		return p.atom()
	case c == 0:
		return nil, fmt.Errorf("missing argument at the end of %q", p.s)
	}
	return nil, fmt.Errorf("unexpected %q at offset %d of %q", string(c), p.pos, p.s)
}

var functionNames = []string{"sqrt", "sin", "cos", "tan", "ln", "log", "exp", "abs"}

// atom := number | variable | function | (sum) | {sum} | [sum] | \command ...
func (p *exprParser) atom() (*expr, error) {
	if err := p.enter(); err != nil {
		return nil, err
	}
	defer p.leave()
	c := p.peek()
	switch {
	case isDigit(c) || c == '.':
		start := p.pos
		for p.pos < len(p.s) && isDigit(p.s[p.pos]) {
			p.pos++
		}
		if p.peek() == '.' {
			p.pos++
			for p.pos < len(p.s) && isDigit(p.s[p.pos]) {
				p.pos++
			}
		}
		v, err := strconv.ParseFloat(p.s[start:p.pos], 64)
		if err != nil {
			return nil, fmt.Errorf("number %q: %w", p.s[start:p.pos], err)
		}
		return &expr{op: "num", num: v}, nil
	case c == '(' || c == '{' || c == '[':
		closer := map[byte]byte{'(': ')', '{': '}', '[': ']'}[c]
		p.pos++
		e, err := p.sum()
		if err != nil {
			return nil, err
		}
		if p.peek() != closer {
			return nil, fmt.Errorf("missing %c at offset %d of %q", closer, p.pos, p.s)
		}
		p.pos++
		return e, nil
	case c == '|':
		p.pos++
		e, err := p.sum()
		if err != nil {
			return nil, err
		}
		if p.peek() != '|' {
			return nil, fmt.Errorf("missing | at offset %d of %q", p.pos, p.s)
		}
		p.pos++
		return &expr{op: "abs", args: []*expr{e}}, nil
	case isLetter(c):
		for _, f := range functionNames {
			if strings.HasPrefix(p.s[p.pos:], f) {
				p.pos += len(f)
				return p.function(f)
			}
		}
		p.pos++
		name := string(c)
		if c == 'e' && p.peek() != '_' { // Euler's number, as in e^{2x} and \ln e
			return &expr{op: "num", num: math.E}, nil
		}
		if p.peek() == '_' { // x_1, a_{10}
			start := p.pos
			p.pos++
			if _, err := p.argument(); err != nil {
				return nil, err
			}
			name += p.s[start:p.pos]
		}
		return &expr{op: "var", name: name}, nil
	case c == '\\':
		cmd := p.command()
		p.pos += 1 + len(cmd)
		switch cmd {
		case "frac":
			num, err := p.argument()
			if err != nil {
				return nil, err
			}
			den, err := p.argument()
			if err != nil {
				return nil, err
			}
			return &expr{op: "/", args: []*expr{num, den}}, nil
		case "sqrt":
			if p.peek() == '[' {
				p.pos++
				deg, err := p.sum()
				if err != nil {
					return nil, err
				}
				if p.peek() != ']' {
					return nil, fmt.Errorf("missing ] in \\sqrt[...] of %q", p.s)
				}
				p.pos++
				x, err := p.argument()
				if err != nil {
					return nil, err
				}
				return &expr{op: "root", args: []*expr{deg, x}}, nil
			}
			x, err := p.argument()
			if err != nil {
				return nil, err
			}
			return &expr{op: "sqrt", args: []*expr{x}}, nil
		case "pi":
			return &expr{op: "num", num: math.Pi}, nil
		case "infty", "inf":
			return &expr{op: "num", num: math.Inf(1)}, nil
		case "sin", "cos", "tan", "ln", "log", "exp":
			return p.function(cmd)
		case "":
			return nil, fmt.Errorf("stray backslash at offset %d of %q", p.pos-1, p.s)
		}
		return nil, fmt.Errorf("unsupported command \\%s in %q", cmd, p.s)
	case c == 0:
		return nil, fmt.Errorf("expression %q ends early", p.s)
	}
	return nil, fmt.Errorf("unexpected %q at offset %d of %q", string(c), p.pos, p.s)
}

// function parses the argument of a named function: f(x), f{x}, f x, and
// log_b(x).
func (p *exprParser) function(name string) (*expr, error) {
	var base *expr
	if name == "log" && p.peek() == '_' {
		p.pos++
		b, err := p.argument()
		if err != nil {
			return nil, err
		}
		base = b
	}
	var arg *expr
	var err error
	if name == "sqrt" {
		arg, err = p.argument()
	} else {
		arg, err = p.power()
	}
	if err != nil {
		return nil, err
	}
	if base != nil {
		return &expr{op: "log", args: []*expr{base, arg}}, nil
	}
	return &expr{op: name, args: []*expr{arg}}, nil
}

// exactRational parses s as a plain rational: an integer, a decimal, a/b,
// or \frac{a}{b} with integer a and b, optionally negative. It reports
// false for anything else.
func exactRational(s string) (*big.Rat, bool) {
	neg := false
	if strings.HasPrefix(s, "-") {
		neg, s = true, s[1:]
	}
	var r *big.Rat
	if num, den, ok := splitFraction(s); ok {
		n, ok1 := plainNumber(num)
		d, ok2 := plainNumber(den)
		if !ok1 || !ok2 || d.Sign() == 0 {
			return nil, false
		}
		r = n.Quo(n, d)
	} else {
		n, ok := plainNumber(s)
		if !ok {
			return nil, false
		}
		r = n
	}
	if neg {
		r.Neg(r)
	}
	return r, true
}

// splitFraction splits "a/b", "\frac{a}{b}" and "\frac12".
func splitFraction(s string) (string, string, bool) {
	if strings.HasPrefix(s, `\frac`) {
		rest := s[len(`\frac`):]
		num, rest, ok := macroArg(rest)
		if !ok {
			return "", "", false
		}
		den, rest, ok := macroArg(rest)
		if !ok || rest != "" {
			return "", "", false
		}
		return num, den, true
	}
	if i := strings.IndexByte(s, '/'); i > 0 && strings.Count(s, "/") == 1 {
		return s[:i], s[i+1:], true
	}
	return "", "", false
}

// macroArg takes one LaTeX argument ({...} or one character) off s.
func macroArg(s string) (arg, rest string, ok bool) {
	if s == "" {
		return "", "", false
	}
	if s[0] != '{' {
		return s[:1], s[1:], true
	}
	end, ok := matchBrace(s, 0)
	if !ok {
		return "", "", false
	}
	return s[1:end], s[end+1:], true
}

// plainNumber parses digits with an optional decimal part exactly.
func plainNumber(s string) (*big.Rat, bool) {
	if s == "" || len(s) > 200 {
		return nil, false
	}
	dot := false
	digits := 0
	for i := 0; i < len(s); i++ {
		switch {
		case isDigit(s[i]):
			digits++
		case s[i] == '.' && !dot:
			dot = true
		default:
			return nil, false
		}
	}
	if digits == 0 {
		return nil, false
	}
	r, ok := new(big.Rat).SetString(s)
	return r, ok
}

// relTol is how close two evaluated values must be to count as equal.
const relTol = 1e-8

func closeEnough(a, b float64) bool {
	if math.IsInf(a, 0) || math.IsInf(b, 0) {
		return a == b
	}
	if math.IsNaN(a) || math.IsNaN(b) {
		return false
	}
	return math.Abs(a-b) <= relTol*math.Max(1, math.Max(math.Abs(a), math.Abs(b)))
}

// evalPoints are the fixed points at which expressions with variables are
// compared: fixed so a verdict never depends on chance, positive and away
// from 0 and 1 so square roots, logs and divisions stay defined.
var evalPoints = []float64{1.7320508, 0.6180339, 2.7182818, 1.4142135, 3.1622776, 0.8660254, 2.2360679}

// sameValue compares two expressions: exactly when both are numbers, at
// the same points otherwise. Points where both sides are undefined are
// skipped; at least three must be defined on both sides.
func sameValue(a, b *expr) bool {
	vars := map[string]bool{}
	a.collectVars(vars)
	b.collectVars(vars)
	if len(vars) == 0 {
		return closeEnough(a.eval(nil), b.eval(nil))
	}
	names := make([]string, 0, len(vars))
	for v := range vars {
		names = append(names, v)
	}
	sort.Strings(names)
	defined := 0
	for i := range evalPoints {
		env := make(map[string]float64, len(names))
		for j, name := range names {
			env[name] = evalPoints[(i+j*3)%len(evalPoints)] * float64(1+j%2)
		}
		x, y := a.eval(env), b.eval(env)
		xbad, ybad := math.IsNaN(x) || math.IsInf(x, 0), math.IsNaN(y) || math.IsInf(y, 0)
		if xbad && ybad {
			continue
		}
		if xbad != ybad || !closeEnough(x, y) {
			return false
		}
		defined++
	}
	return defined >= 3
}
