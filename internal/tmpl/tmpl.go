// Package tmpl parses and renders prompt templates (text/template) from
// recipes, which may come from elsewhere, within bounds: Check refuses
// what could run for unbounded time or memory (loops, template calls,
// unbounded printf widths, functions beyond a fixed list), so a checked
// template runs in time proportional to its size; Execute caps its output.
package tmpl

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"text/template"
	tparse "text/template/parse"
)

// MaxOutput is the output cap of a rendered prompt template (1 MiB).
const MaxOutput = 1 << 20

// ErrTooLong is returned by Execute when the output passes its cap.
var ErrTooLong = errors.New("template output over its size cap")

// allowedFuncs are the built-in functions a checked template may call:
// none loops, and each returns at most a few times its arguments' size.
// printf is allowed with a constant format of bounded width (checkPrintf).
var allowedFuncs = []string{"and", "or", "not", "eq", "ne", "lt", "le", "gt", "ge",
	"len", "index", "slice", "print", "println", "printf", "html", "js", "urlquery"}

// Parse parses text as the template name (missing keys are errors) and
// checks it (Check) against fields.
func Parse(name, text string, fields ...string) (*template.Template, error) {
	t, err := template.New(name).Option("missingkey=error").Parse(text)
	if err != nil {
		return nil, err
	}
	if err := Check(t, fields...); err != nil {
		return nil, err
	}
	return t, nil
}

// Check refuses a parsed template that uses {{range}}, {{template}},
// {{block}} or {{define}}, a function outside allowedFuncs, printf with a
// format that is not a constant or has a width or precision of more than
// three digits or from an argument, or (when fields is not empty) a field
// of the data outside fields. The error lists everything refused.
func Check(t *template.Template, fields ...string) error {
	var bad []string
	add := func(s string) {
		if !slices.Contains(bad, s) {
			bad = append(bad, s)
		}
	}
	if len(t.Templates()) > 1 {
		add("{{define}}")
	}
	visit := func(n tparse.Node) bool {
		switch n := n.(type) {
		case *tparse.CommandNode:
			if id, ok := n.Args[0].(*tparse.IdentifierNode); ok {
				switch {
				case !slices.Contains(allowedFuncs, id.Ident):
					add(id.Ident)
				case id.Ident == "printf":
					if err := checkPrintf(n.Args[1:]); err != "" {
						add(err)
					}
				}
			}
		case *tparse.FieldNode:
			if len(fields) > 0 && !slices.Contains(fields, n.Ident[0]) {
				add("." + n.Ident[0])
			}
		case *tparse.VariableNode:
			if len(fields) > 0 && n.Ident[0] == "$" && len(n.Ident) > 1 && !slices.Contains(fields, n.Ident[1]) {
				add("." + n.Ident[1])
			}
		case *tparse.RangeNode:
			add("{{range}}")
			return false
		case *tparse.TemplateNode:
			add("{{template}}")
			return false
		}
		return true
	}
	if t.Tree != nil {
		Walk(t.Tree.Root, visit)
	}
	if len(bad) == 0 {
		return nil
	}
	allowed := "no fields"
	if len(fields) > 0 {
		allowed = "fields ." + strings.Join(fields, ", .")
	}
	return fmt.Errorf("uses %s: not supported in a prompt template (%s; functions %s; no loops or template calls)",
		strings.Join(bad, ", "), allowed, strings.Join(allowedFuncs, " "))
}

// Walk calls visit on n and, while visit returns true, on the nodes of its
// actions, pipelines, commands and the branches of if and with (range
// and template bodies too, when visit descends into them), in order.
func Walk(n tparse.Node, visit func(tparse.Node) bool) {
	if !visit(n) {
		return
	}
	var kids []tparse.Node
	switch n := n.(type) {
	case *tparse.ListNode:
		kids = n.Nodes
	case *tparse.ActionNode:
		kids = []tparse.Node{n.Pipe}
	case *tparse.PipeNode:
		for _, c := range n.Cmds {
			kids = append(kids, c)
		}
	case *tparse.CommandNode:
		kids = n.Args
	case *tparse.ChainNode:
		kids = []tparse.Node{n.Node}
	case *tparse.IfNode:
		kids = branches(&n.BranchNode)
	case *tparse.WithNode:
		kids = branches(&n.BranchNode)
	case *tparse.RangeNode:
		kids = branches(&n.BranchNode)
	case *tparse.TemplateNode:
		if n.Pipe != nil {
			kids = []tparse.Node{n.Pipe}
		}
	}
	for _, k := range kids {
		Walk(k, visit)
	}
}

// branches are a branch node's pipeline, list and else list, those that
// are there.
func branches(b *tparse.BranchNode) []tparse.Node {
	out := []tparse.Node{b.Pipe, b.List}
	if b.ElseList != nil {
		out = append(out, b.ElseList)
	}
	return out
}

// checkPrintf returns what is wrong with printf's arguments, or "".
func checkPrintf(args []tparse.Node) string {
	if len(args) == 0 {
		return ""
	}
	s, ok := args[0].(*tparse.StringNode)
	if !ok {
		return "printf with a format that is not a constant string"
	}
	f := s.Text
	for i := 0; i < len(f); i++ {
		if f[i] != '%' {
			continue
		}
		digits := 0
		for i++; i < len(f) && strings.IndexByte("+-# 0123456789.[]*", f[i]) >= 0; i++ {
			switch c := f[i]; {
			case c == '*':
				return "printf with a width or precision from an argument"
			case c >= '0' && c <= '9':
				if digits++; digits > 3 {
					return fmt.Sprintf("printf with a width or precision over 999 (%q)", f)
				}
			default:
				digits = 0
			}
		}
	}
	return ""
}

// Execute renders t with data. Rendering stops at max bytes of output:
// then it returns the first max bytes and ErrTooLong. (A caller that
// renders on past the error gets a prompt too long for any context, never
// one that silently lacks the field that did not fit.)
func Execute(t *template.Template, data any, max int) (string, error) {
	w := &capped{max: max}
	if err := t.Execute(w, data); err != nil {
		if errors.Is(err, ErrTooLong) {
			return w.b.String(), fmt.Errorf("template %q: %w (%d bytes)", t.Name(), ErrTooLong, max)
		}
		return "", err
	}
	return w.b.String(), nil
}

// capped is a strings.Builder that refuses to grow past max.
type capped struct {
	b   strings.Builder
	max int
}

func (w *capped) Write(p []byte) (int, error) {
	if room := w.max - w.b.Len(); len(p) > room {
		w.b.Write(p[:max(room, 0)])
		return max(room, 0), ErrTooLong
	}
	return w.b.Write(p)
}
