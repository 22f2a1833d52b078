package verify

import (
	"regexp"
	"strings"
)

// Equivalent reports whether two final answers are the same mathematical
// answer. Both are normalized first (see normalize); then they are equal
// when their normal forms are the same text, or as
//
//   - lists: bracketed tuples and intervals element by element with the
//     same brackets ("(1,2]" is not "[1,2]"), sets \{...\} and bare comma
//     lists ("2, -3" for the roots of an equation) in any order;
//   - percentages: "50\%" equals "50" and "0.5";
//   - equations: "x=3" equals "3"; "y=2x+1" equals "2x+1=y";
//   - numbers: exactly as rationals when both are plain (1/2 = 0.5 =
//     \frac{1}{2} = 0.50), else by evaluating both (\sqrt{4} = 2);
//   - expressions with variables: equal values at fixed points (2x+1 =
//     1+2x).
func Equivalent(a, b string) bool {
	if len(a) > MaxAnswerBytes || len(b) > MaxAnswerBytes {
		return false
	}
	na, nb := normalize(a), normalize(b)
	if na == "" || nb == "" {
		return false
	}
	return equivalentNormal(na, nb, 0)
}

func equivalentNormal(a, b string, depth int) bool {
	if a == b {
		return true
	}
	if depth > 4 {
		return false
	}
	la, oka := splitList(a)
	lb, okb := splitList(b)
	if oka || okb {
		if !oka || !okb || !sameBrackets(la, lb) || len(la.items) != len(lb.items) {
			return false
		}
		if la.ordered() && lb.ordered() {
			for i := range la.items {
				if !equivalentNormal(la.items[i], lb.items[i], depth+1) {
					return false
				}
			}
			return true
		}
		return matchUnordered(la.items, lb.items, depth+1)
	}
	if ea, eb := strings.Count(a, "="), strings.Count(b, "="); ea == 1 || eb == 1 {
		return equivalentEquations(a, b, ea, eb, depth)
	}
	for _, x := range percentForms(a) {
		for _, y := range percentForms(b) {
			if scalarEqual(x, y) {
				return true
			}
		}
	}
	return false
}

// equivalentEquations compares answers where at least one side is an
// equation: "x=3" against "3" drops the single-variable left side; two
// equations are equal when lhs-rhs agree up to sign.
func equivalentEquations(a, b string, ea, eb, depth int) bool {
	switch {
	case ea == 1 && eb == 1:
		la, ra, _ := strings.Cut(a, "=")
		lb, rb, _ := strings.Cut(b, "=")
		if la == lb && equivalentNormal(ra, rb, depth+1) {
			return true
		}
		da, err1 := parseExpr("(" + la + ")-(" + ra + ")")
		db, err2 := parseExpr("(" + lb + ")-(" + rb + ")")
		if err1 != nil || err2 != nil {
			return false
		}
		return sameValue(da, db) || sameValue(da, &expr{op: "neg", args: []*expr{db}})
	case ea == 1 && eb == 0:
		lhs, rhs, _ := strings.Cut(a, "=")
		return isVariableName(lhs) && equivalentNormal(rhs, b, depth+1)
	case ea == 0 && eb == 1:
		lhs, rhs, _ := strings.Cut(b, "=")
		return isVariableName(lhs) && equivalentNormal(a, rhs, depth+1)
	}
	return false
}

func isVariableName(s string) bool {
	return len(s) == 1 && isLetter(s[0]) || len(s) > 2 && isLetter(s[0]) && s[1] == '_'
}

// percentForms lists the readings of an answer: itself, and for "p%" both
// p and p/100.
func percentForms(s string) []string {
	if p, ok := strings.CutSuffix(s, "%"); ok && p != "" {
		return []string{p, "(" + p + ")/100"}
	}
	return []string{s}
}

// scalarEqual compares two answers that are single values.
func scalarEqual(a, b string) bool {
	if ra, ok := exactRational(a); ok {
		if rb, ok := exactRational(b); ok {
			return ra.Cmp(rb) == 0
		}
	}
	ea, err := parseExpr(a)
	if err != nil {
		return false
	}
	eb, err := parseExpr(b)
	if err != nil {
		return false
	}
	return sameValue(ea, eb)
}

// list is an answer made of comma-separated items.
type list struct {
	open, close string // "(", "[", `\{`, or "" for a bare list
	items       []string
}

// ordered reports whether item order matters: tuples and intervals yes,
// sets and bare lists of solutions no.
func (l list) ordered() bool { return l.open == "(" || l.open == "[" }

func sameBrackets(a, b list) bool {
	if a.open == b.open && a.close == b.close {
		return true
	}
	// A tuple written with and without parentheses: (1,2) and 1,2.
	bare := func(l list) bool { return l.open == "" }
	paren := func(l list) bool { return l.open == "(" && l.close == ")" }
	return bare(a) && paren(b) || paren(a) && bare(b)
}

// splitList splits an answer at its top-level commas, taking off one pair
// of enclosing brackets: (a,b), [a,b), (a,b], [a,b], \{a,b\}, or a bare
// a,b. A single value in brackets is not a list.
func splitList(s string) (list, bool) {
	l := list{}
	inner := s
	switch {
	case strings.HasPrefix(s, `\{`) && strings.HasSuffix(s, `\}`) && len(s) >= 4:
		l.open, l.close, inner = `\{`, `\}`, s[2:len(s)-2]
	case len(s) >= 2 && (s[0] == '(' || s[0] == '[') && (s[len(s)-1] == ')' || s[len(s)-1] == ']'):
		if enclosed(s) {
			l.open, l.close, inner = s[:1], s[len(s)-1:], s[1:len(s)-1]
		}
	}
	items := splitTopLevel(inner, ',')
	if len(items) < 2 && l.open != `\{` {
		return list{}, false
	}
	for _, it := range items {
		if it == "" {
			return list{}, false
		}
	}
	l.items = items
	return l, true
}

// enclosed reports whether the bracket opening s closes at its last byte
// (so "(1)(2)" is not enclosed). Intervals close with either bracket.
func enclosed(s string) bool {
	depth := 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++
		case '(', '[', '{':
			depth++
		case ')', ']', '}':
			depth--
			if depth == 0 && i != len(s)-1 {
				return false
			}
		}
	}
	return depth == 0
}

// splitTopLevel splits s at sep outside brackets.
func splitTopLevel(s string, sep byte) []string {
	var out []string
	depth, start := 0, 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++
		case '(', '[', '{':
			depth++
		case ')', ']', '}':
			depth--
		case sep:
			if depth == 0 {
				out = append(out, s[start:i])
				start = i + 1
			}
		}
	}
	return append(out, s[start:])
}

// matchUnordered pairs the items of a and b one to one.
func matchUnordered(a, b []string, depth int) bool {
	used := make([]bool, len(b))
	for _, x := range a {
		found := false
		for j, y := range b {
			if !used[j] && equivalentNormal(x, y, depth) {
				used[j], found = true, true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

var (
	thousandsRE  = regexp.MustCompile(`^-?\d{1,3}(,\d{3})+(\.\d+)?$`)
	mixedRE      = regexp.MustCompile(`^(-?)(\d+)\\frac\{?(\d+)\}?\{?(\d+)\}?$`)
	unitSpacedRE = regexp.MustCompile(`^(.*[\d}.%])\s+[a-zA-Z]{2,}(?:\s+[a-zA-Z]{2,})*(?:\^[23])?$`)
	unitWordRE   = regexp.MustCompile(`^(.*\d)(?:cm|mm|km|kg|mg|ml|ft|feet|foot|inch|inches|yd|yards|miles|mph|lbs|lb|oz|sec|secs|seconds|min|mins|minutes|hr|hrs|hours|days|weeks|months|years|dollars|cents|units|degrees|deg|meters|metres|grams)(?:\^[23])?$`)
	choiceRE     = regexp.MustCompile(`^\(?([A-Ea-e])\)?$`)
	wrapperRE    = regexp.MustCompile(`\\(?:text|textbf|textit|textrm|mathrm|mathbf|mathit|mbox|operatorname|displaystyle)\s*\{`)
)

// normalize rewrites an answer into a canonical text: math delimiters,
// \text{} and \mbox{} wrappers, \left/\right, spacing commands, degree
// signs, dollar signs, units after a number, thousands separators,
// \dfrac/\tfrac, a trailing period and all spaces removed; mixed numbers
// (2\frac{1}{2}) written as fractions; multiple-choice letters in upper
// case without parentheses. Text answers are compared in lower case.
func normalize(s string) string {
	s = strings.TrimSpace(s)
	s = stripDelimiters(s)
	s = unwrapCommands(s)
	r := strings.NewReplacer(
		`\left`, "", `\right`, "", `\bigl`, "", `\bigr`, "", `\Bigl`, "", `\Bigr`, "",
		`\!`, "", `\,`, "", `\;`, "", `\:`, "", `\ `, " ", `\quad`, " ", `\qquad`, " ", "~", " ",
		`\dfrac`, `\frac`, `\tfrac`, `\frac`, `\cfrac`, `\frac`,
		`^{\circ}`, "", `^\circ`, "", `\circ`, "", "°", "",
		`\%`, "%", `\$`, "", "$", "", `{,}`, ",",
		`\leq`, "≤", `\geq`, "≥", `\le`, "≤", `\ge`, "≥", `\neq`, "≠", "\u2212", "-",
	)
	s = r.Replace(s)
	s = strings.TrimSpace(s)
	s = strings.TrimSuffix(s, ".")
	s = strings.TrimSpace(s)
	for _, p := range []string{"x\\in", "x \\in"} {
		s = strings.TrimPrefix(s, p)
	}
	if m := unitSpacedRE.FindStringSubmatch(s); m != nil {
		s = m[1]
	}
	s = strings.Join(strings.Fields(s), "")
	if m := unitWordRE.FindStringSubmatch(s); m != nil {
		s = m[1]
	}
	if thousandsRE.MatchString(s) {
		s = strings.ReplaceAll(s, ",", "")
	}
	if m := mixedRE.FindStringSubmatch(s); m != nil && m[3] != "" {
		// 2\frac{1}{2} means 2 + 1/2, not 2 * 1/2.
		s = m[1] + "(" + m[2] + "+" + m[3] + "/" + m[4] + ")"
	}
	if m := choiceRE.FindStringSubmatch(s); m != nil {
		s = strings.ToUpper(m[1])
	}
	s = strings.TrimSuffix(s, ".")
	if isText(s) {
		s = strings.ToLower(s)
	}
	return s
}

// isText reports whether s reads as words rather than math.
func isText(s string) bool {
	letters := 0
	for i := 0; i < len(s); i++ {
		if isLetter(s[i]) {
			letters++
		} else if s[i] != '\'' && s[i] != '-' {
			return false
		}
	}
	return letters >= 2
}

// stripDelimiters takes off $...$, \(...\) and \[...\] around the whole
// answer.
func stripDelimiters(s string) string {
	for _, d := range [][2]string{{"$$", "$$"}, {"$", "$"}, {`\(`, `\)`}, {`\[`, `\]`}} {
		if len(s) >= len(d[0])+len(d[1]) && strings.HasPrefix(s, d[0]) && strings.HasSuffix(s, d[1]) {
			s = strings.TrimSpace(s[len(d[0]) : len(s)-len(d[1])])
		}
	}
	return s
}

// unwrapCommands replaces \text{X}, \mbox{X}, \mathrm{X} and the like
// by X, keeping nested braces whole.
func unwrapCommands(s string) string {
	for range 50 {
		loc := wrapperRE.FindStringIndex(s)
		if loc == nil {
			return s
		}
		open := loc[1] - 1
		end, ok := matchBrace(s, open)
		if !ok {
			return s
		}
		s = s[:loc[0]] + s[open+1:end] + s[end+1:]
	}
	return s
}
