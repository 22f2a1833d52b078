package simlm

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"regexp"
	"strconv"
	"strings"

	"github.com/rlnode/rlnode/learner/tokenizer"
)

type engineMessage = tokenizer.Message

// writer composes one response. Tool calls are replayed: a call whose
// response is already in the conversation returns it and starts a new
// segment; a call without one ends the segment (stopWriting).
type writer struct {
	p    prompt
	rng  *rand.Rand
	cur  strings.Builder
	used int
	// verbatim: arithmetic expressions go to tools as the question writes them.
	verbatim bool
}

type stopWriting struct{}

func (w *writer) say(format string, args ...any) { fmt.Fprintf(&w.cur, format, args...) }

func (w *writer) call(name, key, arg string) string {
	b, _ := json.Marshal(map[string]any{"name": name, "arguments": map[string]string{key: arg}})
	w.say("<tool_call>%s</tool_call>", b)
	if w.used < len(w.p.responses) {
		r := w.p.responses[w.used]
		w.used++
		w.cur.Reset()
		return r
	}
	panic(stopWriting{})
}

func (w *writer) run() {
	defer func() {
		if r := recover(); r != nil {
			if _, ok := r.(stopWriting); !ok {
				panic(r)
			}
		}
	}()
	pr, err := parseProblem(w.p.question)
	if err == nil && w.verbatim && pr.written != "" {
		pr.expr = strings.ReplaceAll(pr.written, " / ", " // ")
	}
	if err != nil {
		w.say("I cannot solve this.\n")
		if w.p.role == "answerer" {
			w.say("#### 0")
		}
		return
	}
	switch w.p.role {
	case "reasoner":
		w.reason(pr)
	case "verifier":
		w.verify(pr)
	default:
		w.answer(pr)
	}
}

// errorRate scales an operation's difficulty by how the model works.
func (w *writer) errorRate(op byte, a, b int64, mult float64) float64 {
	p := difficulty(op, a, b) * mult
	if w.p.check {
		p *= 0.6
	}
	switch {
	case w.p.budget > 0 && w.p.budget <= 64:
		p *= 1.25
	case w.p.budget >= 512:
		p *= 0.9
	}
	return min(p, 0.9)
}

// mental computes a op b in the model's head: right unless it slips.
func (w *writer) mental(op byte, a, b int64, mult float64) int64 {
	r := apply(op, a, b)
	if w.rng.Float64() >= w.errorRate(op, a, b, mult) {
		return r
	}
	deltas := []int64{1, 2, 10, 1}
	for range digits(r) - 1 {
		deltas[3] *= 10
	}
	d := deltas[w.rng.IntN(len(deltas))]
	if w.rng.IntN(2) == 0 {
		d = -d
	}
	return r + d
}

func (w *writer) wantsCalc(op byte, a, b int64) bool {
	return w.p.calc && (w.p.tools || difficulty(op, a, b) >= 0.05)
}

func parseInt(s string) (int64, bool) {
	v, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	return v, err == nil
}

// compute does one step, with the calculator when it wants it.
func (w *writer) compute(op byte, a, b int64, mult float64) int64 {
	if w.wantsCalc(op, a, b) {
		if v, ok := parseInt(w.call("calculator", "expression", fmt.Sprintf("%d %s %d", a, opString(op), b))); ok {
			return v
		}
	}
	return w.mental(op, a, b, mult)
}

func operand(vals []int64, idx int, lit int64) int64 {
	if idx >= 0 {
		return vals[idx]
	}
	return lit
}

func (w *writer) line(i int, op byte, a, b, r int64) {
	switch {
	case w.p.concise:
		w.say("%d %s %d = %d.\n", a, opString(op), b, r)
	case w.p.budget >= 512:
		w.say("Step %d: we compute %d %s %d, which gives %d.\n", i+1, a, opString(op), b, r)
	default:
		w.say("Step %d: %d %s %d = %d.\n", i+1, a, opString(op), b, r)
	}
}

func (w *writer) preamble() {
	if w.p.restate {
		words := strings.Fields(w.p.question)
		w.say("Restating the problem: %s\n", strings.Join(words[:min(len(words), 30)], " "))
	}
	if w.p.stepByStep {
		w.say("Let me think step by step.\n")
	}
}

// usePython: the whole computation as one program, for long chains or
// when there is no calculator.
func (w *writer) usePython(pr *problem) bool {
	return w.p.python && (len(pr.steps) >= 3 || !w.p.calc) && !(w.p.calc && w.p.tools)
}

func (w *writer) reason(pr *problem) {
	w.preamble()
	if w.usePython(pr) {
		if v, ok := parseInt(w.call("python", "code", "print("+pr.expr+")")); ok {
			w.say("The program prints %d.\nSo the result is %d.\n", v, v)
			return
		}
	}
	vals := make([]int64, len(pr.steps))
	for i, s := range pr.steps {
		a, b := operand(vals, s.left, s.lv), operand(vals, s.right, s.rv)
		vals[i] = w.compute(s.op, a, b, 1)
		w.line(i, s.op, a, b, vals[i])
	}
	w.say("So the result is %d.\n", vals[len(vals)-1])
}

var (
	lineRE     = regexp.MustCompile(`(-?\d+) ([-+*/]) (-?\d+)(?: = |, which gives )(-?\d+)\.`)
	resultRE   = regexp.MustCompile(`So the result is (-?\d+)\.`)
	verifiedRE = regexp.MustCompile(`Verified result: (-?\d+)\.`)
	printsRE   = regexp.MustCompile(`The program prints (-?\d+)\.`)
)

// claims are the reasoning's step results, in order.
func claims(reasoning string) []int64 {
	var out []int64
	for _, m := range lineRE.FindAllStringSubmatch(reasoning, -1) {
		v, _ := parseInt(m[4])
		out = append(out, v)
	}
	return out
}

func (w *writer) verify(pr *problem) {
	if w.p.python && !w.p.calc || w.p.python && len(pr.steps) >= 3 {
		if v, ok := parseInt(w.call("python", "code", "print("+pr.expr+")")); ok {
			w.say("The program prints %d.\nVerified result: %d.\n", v, v)
			return
		}
	}
	if m := printsRE.FindStringSubmatch(w.p.reasoning); m != nil {
		// A program computed it: trust it.
		v, _ := parseInt(m[1])
		w.say("The reasoning ran a program.\nVerified result: %d.\n", v)
		return
	}
	cl := claims(w.p.reasoning)
	vals := make([]int64, len(pr.steps))
	for i, s := range pr.steps {
		a, b := operand(vals, s.left, s.lv), operand(vals, s.right, s.rv)
		switch {
		case w.wantsCalc(s.op, a, b):
			vals[i] = w.compute(s.op, a, b, 1)
		case i < len(cl):
			r1 := w.mental(s.op, a, b, 1)
			if r1 == cl[i] {
				vals[i] = r1
				break
			}
			r2 := w.mental(s.op, a, b, 1)
			vals[i] = r1
			if r2 == cl[i] {
				vals[i] = cl[i]
			}
		default:
			vals[i] = w.mental(s.op, a, b, 1)
		}
		switch {
		case i >= len(cl):
			w.say("Step %d was missing: %d.\n", i+1, vals[i])
		case vals[i] != cl[i]:
			w.say("Step %d is wrong: %d, not %d.\n", i+1, vals[i], cl[i])
		case !w.p.concise:
			w.say("Step %d is right.\n", i+1)
		}
	}
	w.say("Verified result: %d.\n", vals[len(vals)-1])
}

// translate renders the problem's expression as the model writes it in
// one go, without working through it: each step of a word problem may be
// read the wrong way round, the more likely the longer the problem.
func (w *writer) translate(pr *problem) string {
	if !pr.word {
		return pr.expr
	}
	var exprs []string
	for _, s := range pr.steps {
		op := s.op
		if w.rng.Float64() < 0.015*float64(len(pr.steps)) {
			switch op {
			case '+':
				op = '-'
			case '-':
				op = '+'
			}
		}
		a, b := strconv.FormatInt(s.lv, 10), strconv.FormatInt(s.rv, 10)
		if s.left >= 0 {
			a = exprs[s.left]
		}
		if s.right >= 0 {
			b = exprs[s.right]
		}
		exprs = append(exprs, "("+a+" "+opString(op)+" "+b+")")
	}
	return exprs[len(exprs)-1]
}

func (w *writer) answer(pr *problem) {
	if w.p.budget >= 512 && !w.p.concise {
		w.say("Based on the work above, here is the final answer.\n")
	}
	ans, ok := int64(0), false
	if m := verifiedRE.FindStringSubmatch(w.p.verification); m != nil {
		ans, ok = parseInt(m[1])
	} else if m := resultRE.FindStringSubmatch(w.p.reasoning); m != nil {
		ans, ok = parseInt(m[1])
	}
	if ok && w.rng.Float64() < 0.005 {
		ans++ // a copying slip
	}
	if !ok {
		ans = w.solveAlone(pr)
	}
	if !w.p.form && w.rng.Float64() < 0.08 {
		w.say("I believe it is %d.", ans)
		return
	}
	w.say("#### %d", ans)
}

// solveAlone finishes the computation without a complete reasoning: from
// the reasoning's last step when it was cut short, else from scratch.
func (w *writer) solveAlone(pr *problem) int64 {
	cl := claims(w.p.reasoning)
	if len(cl) == 0 && (w.p.calc || w.p.python) {
		expr := w.translate(pr)
		var out string
		if w.p.calc {
			out = w.call("calculator", "expression", strings.ReplaceAll(expr, "//", "/"))
		} else {
			out = w.call("python", "code", "print("+strings.ReplaceAll(expr, " / ", " // ")+")")
		}
		if v, ok := parseInt(out); ok {
			return v
		}
	}
	mult := 1.5 // no scratchpad
	if w.p.stepByStep {
		w.preamble()
		mult = 1
	}
	vals := make([]int64, len(pr.steps))
	for i, s := range pr.steps {
		a, b := operand(vals, s.left, s.lv), operand(vals, s.right, s.rv)
		if i < len(cl) {
			vals[i] = cl[i]
			continue
		}
		vals[i] = w.mental(s.op, a, b, mult)
		if w.p.stepByStep {
			w.line(i, s.op, a, b, vals[i])
		}
	}
	return vals[len(vals)-1]
}
