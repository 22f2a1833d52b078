package env

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// Spec names an environment: a built-in one by Name, or Name "http" with
// the URL of a server speaking the protocol of HTTP.
type Spec struct {
	Name    string
	URL     string
	Timeout time.Duration // http: per request; 0: DefaultHTTPOptions'
	Retries int           // http: as HTTPOptions.Retries
}

// builtins are the environments Open knows by name.
var builtins = map[string]func() Env{
	"equations":    func() Env { return NewEquations() },
	NameCalculator: func() Env { return NewMultiply(true) },
	NameMultiply:   func() Env { return NewMultiply(false) },
	NameGuess:      func() Env { return NewGuess() },
}

// Names lists the environment names Open accepts.
func Names() []string {
	names := []string{"http"}
	for n := range builtins {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// Open checks s and returns a constructor of its environment, one Env per
// call (one per episode). Nothing is contacted: an HTTP server is first
// reached at Reset.
func Open(s Spec) (func() Env, error) {
	if s.Name == "http" {
		if _, err := NewHTTP(s.URL, HTTPOptions{Timeout: s.Timeout, Retries: s.Retries}); err != nil {
			return nil, err
		}
		return func() Env {
			h, _ := NewHTTP(s.URL, HTTPOptions{Timeout: s.Timeout, Retries: s.Retries})
			return h
		}, nil
	}
	if s.URL != "" {
		return nil, fmt.Errorf("environment %q: url is for the http environment only", s.Name)
	}
	if mk, ok := builtins[s.Name]; ok {
		return mk, nil
	}
	return nil, fmt.Errorf("unknown environment %q (known: %s)", s.Name, strings.Join(Names(), ", "))
}
