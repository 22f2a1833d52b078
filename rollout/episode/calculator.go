package episode

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Calculator limits: longer expressions, deeper nesting or results that
// are not finite are errors the model sees as tool output.
const (
	maxExprBytes = 512
	maxExprDepth = 64
)

// Calculate evaluates an arithmetic expression safely: numbers (decimal,
// with exponent), + - * / % and ^ or ** (right-associative), unary signs,
// parentheses, and sqrt(), abs(). Nothing else is evaluated; there are no
// names, no calls out, and inputs are bounded in size and depth.
func Calculate(expr string) (string, error) {
	if len(expr) > maxExprBytes {
		return "", fmt.Errorf("expression of %d bytes is over the %d-byte limit", len(expr), maxExprBytes)
	}
	p := &calc{s: expr}
	v, err := p.sum()
	if err != nil {
		return "", err
	}
	p.space()
	if p.i < len(p.s) {
		return "", fmt.Errorf("unexpected %q at offset %d", p.s[p.i:min(len(p.s), p.i+8)], p.i)
	}
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "", fmt.Errorf("result is not a finite number")
	}
	if v == math.Trunc(v) && math.Abs(v) < 1e15 {
		return strconv.FormatInt(int64(v), 10), nil
	}
	return strconv.FormatFloat(v, 'g', 12, 64), nil
}

type calc struct {
	s     string
	i     int
	depth int
}

func (p *calc) space() {
	for p.i < len(p.s) && (p.s[p.i] == ' ' || p.s[p.i] == '\t' || p.s[p.i] == '\n') {
		p.i++
	}
}

func (p *calc) peek(tok string) bool {
	p.space()
	return strings.HasPrefix(p.s[p.i:], tok)
}

func (p *calc) sum() (float64, error) {
	v, err := p.product()
	for err == nil {
		switch {
		case p.peek("+"):
			p.i++
			var w float64
			w, err = p.product()
			v += w
		case p.peek("-"):
			p.i++
			var w float64
			w, err = p.product()
			v -= w
		default:
			return v, nil
		}
	}
	return 0, err
}

func (p *calc) product() (float64, error) {
	v, err := p.unary()
	for err == nil {
		switch {
		case p.peek("**"):
			return v, nil // handled by power
		case p.peek("*"), p.peek("/"), p.peek("%"):
			op := p.s[p.i]
			p.i++
			var w float64
			if w, err = p.unary(); err != nil {
				return 0, err
			}
			switch op {
			case '*':
				v *= w
			case '/':
				if w == 0 {
					return 0, fmt.Errorf("division by zero")
				}
				v /= w
			case '%':
				if w == 0 {
					return 0, fmt.Errorf("modulo by zero")
				}
				v = math.Mod(v, w)
			}
		default:
			return v, nil
		}
	}
	return 0, err
}

func (p *calc) unary() (float64, error) {
	p.depth++
	defer func() { p.depth-- }()
	if p.depth > maxExprDepth {
		return 0, fmt.Errorf("expression nested deeper than %d", maxExprDepth)
	}
	switch {
	case p.peek("-"):
		p.i++
		v, err := p.unary()
		return -v, err
	case p.peek("+"):
		p.i++
		return p.unary()
	}
	return p.power()
}

func (p *calc) power() (float64, error) {
	base, err := p.atom()
	if err != nil {
		return 0, err
	}
	switch {
	case p.peek("**"):
		p.i += 2
	case p.peek("^"):
		p.i++
	default:
		return base, nil
	}
	exp, err := p.unary() // right-associative, binds a unary minus: 2^-1
	if err != nil {
		return 0, err
	}
	return math.Pow(base, exp), nil
}

func (p *calc) atom() (float64, error) {
	p.space()
	if p.i >= len(p.s) {
		return 0, fmt.Errorf("expression ends early")
	}
	for _, fn := range []string{"sqrt", "abs"} {
		if strings.HasPrefix(p.s[p.i:], fn+"(") {
			p.i += len(fn)
			v, err := p.atom()
			if err != nil {
				return 0, err
			}
			if fn == "sqrt" {
				if v < 0 {
					return 0, fmt.Errorf("sqrt of a negative number")
				}
				return math.Sqrt(v), nil
			}
			return math.Abs(v), nil
		}
	}
	if p.s[p.i] == '(' {
		p.i++
		p.depth++
		defer func() { p.depth-- }()
		if p.depth > maxExprDepth {
			return 0, fmt.Errorf("expression nested deeper than %d", maxExprDepth)
		}
		v, err := p.sum()
		if err != nil {
			return 0, err
		}
		if !p.peek(")") {
			return 0, fmt.Errorf("missing ) at offset %d", p.i)
		}
		p.i++
		return v, nil
	}
	j := p.i
	for j < len(p.s) && (p.s[j] >= '0' && p.s[j] <= '9' || p.s[j] == '.' || p.s[j] == '_') {
		j++
	}
	if j < len(p.s) && j > p.i && (p.s[j] == 'e' || p.s[j] == 'E') {
		k := j + 1
		if k < len(p.s) && (p.s[k] == '+' || p.s[k] == '-') {
			k++
		}
		if k < len(p.s) && p.s[k] >= '0' && p.s[k] <= '9' {
			for j = k; j < len(p.s) && p.s[j] >= '0' && p.s[j] <= '9'; j++ {
			}
		}
	}
	if j == p.i {
		return 0, fmt.Errorf("unexpected %q at offset %d", p.s[p.i:min(len(p.s), p.i+8)], p.i)
	}
	v, err := strconv.ParseFloat(strings.ReplaceAll(p.s[p.i:j], "_", ""), 64)
	if err != nil {
		return 0, fmt.Errorf("bad number %q at offset %d", p.s[p.i:j], p.i)
	}
	p.i = j
	return v, nil
}
