package env

import (
	"errors"
	"fmt"
	"strings"
)

// The action format policies write: the last <action>...</action> of a
// turn, holding name or name(param), e.g. <action>divide_terms</action>
// or <action>state_answer(3)</action>.
const (
	ActionOpen  = "<action>"
	ActionClose = "</action>"
)

// ErrNoAction: a turn holds no well-formed action.
var ErrNoAction = errors.New("no action")

// String writes a in the action format, without the tags.
func (a Action) String() string {
	if a.Param == "" {
		return a.Name
	}
	return a.Name + "(" + a.Param + ")"
}

// Text writes a in the action format, with the tags.
func (a Action) Text() string { return ActionOpen + a.String() + ActionClose }

// Usage is how spec is written in the action format: name, or
// name(param).
func (s ActionSpec) Usage() string {
	if s.Param == "" {
		return s.Name
	}
	return s.Name + "(" + s.Param + ")"
}

// ParseAction reads the last <action>...</action> of text. The name is
// lower-case letters, digits and underscores, starting with a letter; a
// parameter is what stands between the parentheses, trimmed. Anything
// else is an error wrapping ErrNoAction.
func ParseAction(text string) (Action, error) {
	end := strings.LastIndex(text, ActionClose)
	if end < 0 {
		return Action{}, fmt.Errorf("%w: no %s...%s in the turn", ErrNoAction, ActionOpen, ActionClose)
	}
	start := strings.LastIndex(text[:end], ActionOpen)
	if start < 0 {
		return Action{}, fmt.Errorf("%w: %s without %s", ErrNoAction, ActionClose, ActionOpen)
	}
	body := strings.TrimSpace(text[start+len(ActionOpen) : end])
	name, param, hasParam := body, "", false
	if i := strings.IndexByte(body, '('); i >= 0 {
		if !strings.HasSuffix(body, ")") {
			return Action{}, fmt.Errorf("%w: %q: unclosed parameter", ErrNoAction, clip(body))
		}
		name, param, hasParam = strings.TrimSpace(body[:i]), strings.TrimSpace(body[i+1:len(body)-1]), true
	}
	if !isName(name) {
		return Action{}, fmt.Errorf("%w: %q is not an action name", ErrNoAction, clip(name))
	}
	if hasParam && param == "" {
		return Action{}, fmt.Errorf("%w: %s(): empty parameter", ErrNoAction, name)
	}
	return Action{Name: name, Param: param}, nil
}

func isName(s string) bool {
	if s == "" || s[0] < 'a' || s[0] > 'z' {
		return false
	}
	for _, c := range []byte(s) {
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '_' {
			return false
		}
	}
	return true
}

// clip shortens s for an error message.
func clip(s string) string {
	if len(s) > 40 {
		return s[:40] + "..."
	}
	return s
}
