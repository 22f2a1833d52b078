package env

import (
	"errors"
	"fmt"
	"math"
)

// Bounds of the calculator's expressions.
const (
	maxExprLen   = 128
	maxExprDepth = 16
)

// evalInt evaluates an integer expression of decimal numbers, + - *,
// unary minus and parentheses. Anything else, an expression over 128
// bytes or 16 levels deep, or a result beyond int64 is an error.
func evalInt(s string) (int64, error) {
	if len(s) > maxExprLen {
		return 0, fmt.Errorf("expression of %d bytes (at most %d)", len(s), maxExprLen)
	}
	p := &exprParser{s: s}
	v, err := p.sum(0)
	if err != nil {
		return 0, err
	}
	p.space()
	if p.i < len(p.s) {
		return 0, fmt.Errorf("unexpected %q at %d", p.s[p.i], p.i)
	}
	return v, nil
}

type exprParser struct {
	s string
	i int
}

var errOverflow = errors.New("result out of range")

func (p *exprParser) space() {
	for p.i < len(p.s) && (p.s[p.i] == ' ' || p.s[p.i] == '\t') {
		p.i++
	}
}

func (p *exprParser) sum(depth int) (int64, error) {
	v, err := p.product(depth)
	for err == nil {
		p.space()
		if p.i >= len(p.s) || (p.s[p.i] != '+' && p.s[p.i] != '-') {
			return v, nil
		}
		op := p.s[p.i]
		p.i++
		var w int64
		if w, err = p.product(depth); err != nil {
			break
		}
		if op == '-' {
			w = -w
		}
		if (w > 0 && v > math.MaxInt64-w) || (w < 0 && v < math.MinInt64-w) {
			return 0, errOverflow
		}
		v += w
	}
	return 0, err
}

func (p *exprParser) product(depth int) (int64, error) {
	v, err := p.unary(depth)
	for err == nil {
		p.space()
		if p.i >= len(p.s) || p.s[p.i] != '*' {
			return v, nil
		}
		p.i++
		var w int64
		if w, err = p.unary(depth); err != nil {
			break
		}
		if v != 0 && (v*w/v != w || (v == -1 && w == math.MinInt64) || (w == -1 && v == math.MinInt64)) {
			return 0, errOverflow
		}
		v *= w
	}
	return 0, err
}

func (p *exprParser) unary(depth int) (int64, error) {
	if depth > maxExprDepth {
		return 0, fmt.Errorf("nested deeper than %d", maxExprDepth)
	}
	p.space()
	switch {
	case p.i >= len(p.s):
		return 0, errors.New("expression ends early")
	case p.s[p.i] == '-':
		p.i++
		v, err := p.unary(depth + 1)
		if v == math.MinInt64 {
			return 0, errOverflow
		}
		return -v, err
	case p.s[p.i] == '(':
		p.i++
		v, err := p.sum(depth + 1)
		if err != nil {
			return 0, err
		}
		p.space()
		if p.i >= len(p.s) || p.s[p.i] != ')' {
			return 0, fmt.Errorf("missing ) at %d", p.i)
		}
		p.i++
		return v, nil
	case p.s[p.i] >= '0' && p.s[p.i] <= '9':
		var v int64
		for p.i < len(p.s) && p.s[p.i] >= '0' && p.s[p.i] <= '9' {
			d := int64(p.s[p.i] - '0')
			if v > (math.MaxInt64-d)/10 {
				return 0, errOverflow
			}
			v = v*10 + d
			p.i++
		}
		return v, nil
	}
	return 0, fmt.Errorf("unexpected %q at %d", p.s[p.i], p.i)
}
