package dashboard

import (
	"encoding/json"
	"fmt"
	"sort"

	"gopkg.in/yaml.v3"
)

// DiffRow is one recipe setting that differs between runs: its dotted
// path and its value in each run, "" where a run's recipe lacks it.
type DiffRow struct {
	Path   string   `json:"path"`
	Values []string `json:"values"`
}

// RecipeDiff compares resolved recipes (YAML) and returns the settings
// whose values are not all equal, sorted by path. Lists are compared
// whole (one row for a list that differs anywhere).
func RecipeDiff(recipes [][]byte) ([]DiffRow, error) {
	flat := make([]map[string]string, len(recipes))
	paths := map[string]bool{}
	for i, b := range recipes {
		var doc any
		if err := yaml.Unmarshal(b, &doc); err != nil {
			return nil, fmt.Errorf("recipe %d: %w", i+1, err)
		}
		flat[i] = map[string]string{}
		flatten("", doc, flat[i])
		for p := range flat[i] {
			paths[p] = true
		}
	}
	rows := []DiffRow{}
	for p := range paths {
		vals := make([]string, len(flat))
		same := true
		for i, f := range flat {
			vals[i] = f[p]
			_, ok := f[p]
			_, ok0 := flat[0][p]
			same = same && vals[i] == vals[0] && ok == ok0
		}
		if !same {
			rows = append(rows, DiffRow{Path: p, Values: vals})
		}
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].Path < rows[j].Path })
	return rows, nil
}

// flatten writes v's leaves into out under dotted paths; lists and scalars
// are leaves, written as JSON (a string as itself).
func flatten(path string, v any, out map[string]string) {
	if m, ok := v.(map[string]any); ok {
		for k, c := range m {
			p := k
			if path != "" {
				p = path + "." + k
			}
			flatten(p, c, out)
		}
		return
	}
	if path == "" {
		path = "(recipe)"
	}
	if s, ok := v.(string); ok {
		out[path] = s
		return
	}
	b, err := json.Marshal(v)
	if err != nil {
		b = []byte(fmt.Sprint(v))
	}
	out[path] = string(b)
}
