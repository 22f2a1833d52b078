package cluster

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
)

// Well-known resource names (and Memory, in bytes); any other name is a
// custom resource a node declares (`--resource name=N`).
const (
	CPU = "CPU"
	GPU = "GPU"
)

// Resources is an amount per resource name ("CPU", "GPU", custom names).
type Resources map[string]float64

// Clone returns a copy of r.
func (r Resources) Clone() Resources {
	out := make(Resources, len(r))
	for k, v := range r {
		out[k] = v
	}
	return out
}

// Add returns r + o.
func (r Resources) Add(o Resources) Resources {
	out := r.Clone()
	for k, v := range o {
		out[k] += v
	}
	return out
}

// Sub returns r − o.
func (r Resources) Sub(o Resources) Resources {
	out := r.Clone()
	for k, v := range o {
		out[k] -= v
	}
	return out
}

// Check reports an amount that is negative, NaN or infinite: asked for,
// such an amount would make a node's free resources grow (or compare
// false with everything) instead of holding a share of them.
func (r Resources) Check() error {
	for _, k := range sortedKeys(r) {
		if v := r[k]; !validAmount(v) {
			return fmt.Errorf("resource %s: amount %v: want a finite number ≥ 0", k, v)
		}
	}
	return nil
}

// validAmount reports whether v is a finite number ≥ 0 (NaN is not).
func validAmount(v float64) bool { return v >= 0 && !math.IsInf(v, 1) }

// Covers reports whether r has at least need of every resource. A tiny
// tolerance absorbs float sums of fractional CPUs.
func (r Resources) Covers(need Resources) bool {
	for k, v := range need {
		if v > 0 && r[k]+1e-9 < v {
			return false
		}
	}
	return true
}

// Missing lists what r lacks to cover need, as "GPU 2 (has 1)".
func (r Resources) Missing(need Resources) []string {
	var out []string
	for _, k := range sortedKeys(need) {
		if v := need[k]; v > 0 && r[k]+1e-9 < v {
			out = append(out, fmt.Sprintf("%s %s (has %s)", k, fmtAmount(k, v), fmtAmount(k, r[k])))
		}
	}
	return out
}

// String formats r as "{CPU:2 GPU:1}" in sorted order, leaving out zeros.
func (r Resources) String() string {
	var parts []string
	for _, k := range sortedKeys(r) {
		if r[k] != 0 {
			parts = append(parts, k+":"+fmtAmount(k, r[k]))
		}
	}
	return "{" + strings.Join(parts, " ") + "}"
}

// fmtAmount writes an amount of resource k: memory in binary units
// ("40.0 GiB"), others as numbers.
func fmtAmount(k string, v float64) string {
	if k == Memory {
		return FormatBytes(v)
	}
	return strconv.FormatFloat(v, 'g', 6, 64)
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// ParseResources parses "CPU=2,GPU=1,tpu=4" (flags and recipe fields).
func ParseResources(s string) (Resources, error) {
	out := Resources{}
	if strings.TrimSpace(s) == "" {
		return out, nil
	}
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("resource %q: want NAME=AMOUNT", kv)
		}
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || !validAmount(f) {
			return nil, fmt.Errorf("resource %q: amount must be a finite non-negative number", kv)
		}
		out[k] = f
	}
	return out, nil
}

// matchLabels reports whether a node's labels include every selector pair.
func matchLabels(labels, selector map[string]string) bool {
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}

func fmtLabels(l map[string]string) string {
	var parts []string
	for _, k := range sortedKeys(l) {
		parts = append(parts, k+"="+l[k])
	}
	return strings.Join(parts, ",")
}
