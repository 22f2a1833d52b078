package recipes

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// ErrInvalid marks a recipe that does not load: errors.Is(err, ErrInvalid)
// holds for every error Parse and Load return about the recipe's content.
var ErrInvalid = errors.New("invalid recipe")

// Pos is where a value came from: a line of a recipe file, or a --set
// override.
type Pos struct {
	File string
	Line int    // 0 when unknown (the whole file)
	Set  string // "a.b=c" when the value came from --set a.b=c
}

func (p Pos) String() string {
	switch {
	case p.Set != "":
		return "--set " + p.Set
	case p.Line > 0:
		return fmt.Sprintf("%s:%d", p.File, p.Line)
	}
	return p.File
}

// Error is one problem with a recipe: "FILE:LINE: field.path: message", or
// "--set a.b=c: field.path: message" when an override caused it.
type Error struct {
	Pos  Pos
	Path string // dotted key path, list elements by index: engines.policy.vllm.servers.0
	Msg  string
	// More is set on the last Error when problems past MaxErrors were
	// left out: how many (Msg says so).
	More int
}

func (e *Error) Error() string {
	if e.Path == "" {
		return e.Pos.String() + ": " + e.Msg
	}
	return e.Pos.String() + ": " + e.Path + ": " + e.Msg
}

// Errors are all the problems found in one recipe, in file order, the
// overrides' after the file's.
type Errors []*Error

func (es Errors) Error() string {
	lines := make([]string, len(es))
	for i, e := range es {
		lines[i] = e.Error()
	}
	return strings.Join(lines, "\n")
}

// Count is the number of problems found: those listed and those left
// out past MaxErrors.
func (es Errors) Count() int {
	n := 0
	for _, e := range es {
		if e.More > 0 {
			n += e.More
		} else {
			n++
		}
	}
	return n
}

// Is makes errors.Is(err, ErrInvalid) hold.
func (es Errors) Is(target error) bool { return target == ErrInvalid }

func (es Errors) sort() {
	sort.SliceStable(es, func(i, j int) bool {
		a, b := es[i].Pos, es[j].Pos
		if (a.Set == "") != (b.Set == "") {
			return a.Set == ""
		}
		return a.Line < b.Line
	})
}

// decoder decodes a yaml.Node tree onto a struct strictly, collecting every
// error with its position, and records where each path's value came from.
type decoder struct {
	file string
	sets map[*yaml.Node]string // nodes that came from --set, and the override
	pos  map[string]Pos        // path → position of its value
	errs Errors
	// dropped counts the problems past MaxErrors, not reported.
	dropped int
	// mergedOf holds each mapping's pairs with its merge keys expanded,
	// computed once: a merge source named many times (directly or through
	// other anchors) costs one expansion, not one per mention. A nil entry
	// marks a mapping being expanded, so one that merges itself is refused.
	mergedOf map[*yaml.Node][][2]*yaml.Node
}

func (d *decoder) at(n *yaml.Node) Pos {
	if s, ok := d.sets[n]; ok {
		return Pos{File: d.file, Set: s}
	}
	return Pos{File: d.file, Line: n.Line}
}

// MaxErrors bounds the problems decoding reports: past it they are only
// counted, so a recipe built to produce millions of them (a section of
// unknown keys merged into every section) costs neither the time to
// format them nor the memory to hold them.
const MaxErrors = 200

func (d *decoder) errorf(n *yaml.Node, path, format string, args ...any) {
	if d.full() {
		return
	}
	d.errs = append(d.errs, &Error{Pos: d.at(n), Path: path, Msg: fmt.Sprintf(format, args...)})
}

// full tells whether MaxErrors are reported, counting the one not.
func (d *decoder) full() bool {
	if len(d.errs) < MaxErrors {
		return false
	}
	d.dropped++
	return true
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// describe names what a node holds, for "want X, got Y" messages.
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a section (key: value pairs)"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		if n.Tag == "!!null" {
			return "no value"
		}
		return strconv.Quote(n.Value)
	}
	return "an unsupported YAML node"
}

type defaulter interface{ setDefaults() }

func (d *decoder) decode(n *yaml.Node, v reflect.Value, path string) {
	for n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	if path != "" {
		d.pos[path] = d.at(n)
	}
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		switch v.Kind() {
		case reflect.Pointer, reflect.Slice, reflect.Map:
			v.SetZero() // an explicit null removes an optional section or list
		default:
			if _, set := d.sets[n]; set {
				d.errorf(n, path, "null removes a key, and the recipe does not set %s (nothing to remove)", path)
			} else {
				d.errorf(n, path, "no value (remove the key to keep the default)")
			}
		}
		return
	}
	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() {
			v.Set(reflect.New(v.Type().Elem()))
			if df, ok := v.Interface().(defaulter); ok {
				df.setDefaults()
			}
		}
		d.decode(n, v.Elem(), path)
	case reflect.Struct:
		d.decodeStruct(n, v, path)
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			d.errorf(n, path, "want a list, got %s", describe(n))
			return
		}
		s := reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content))
		for i, c := range n.Content {
			d.decode(c, s.Index(i), join(path, strconv.Itoa(i)))
		}
		v.Set(s)
	case reflect.Map:
		if n.Kind != yaml.MappingNode {
			d.errorf(n, path, "want a section (name: value pairs), got %s", describe(n))
			return
		}
		m := reflect.MakeMapWithSize(v.Type(), len(n.Content)/2)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, val := n.Content[i], n.Content[i+1]
			if k.Kind != yaml.ScalarNode || k.Value == "" {
				d.errorf(k, path, "want a name as key, got %s", describe(k))
				continue
			}
			if m.MapIndex(reflect.ValueOf(k.Value)).IsValid() {
				d.errorf(k, join(path, k.Value), "key given twice")
				continue
			}
			e := reflect.New(v.Type().Elem()).Elem()
			d.decode(val, e, join(path, k.Value))
			m.SetMapIndex(reflect.ValueOf(k.Value), e)
		}
		v.Set(m)
	default:
		d.decodeScalar(n, v, path)
	}
}

// fieldsOf maps yaml keys to field indexes, in declaration order.
func fieldsOf(t reflect.Type) (keys []string, index map[string]int) {
	index = map[string]int{}
	for i := 0; i < t.NumField(); i++ {
		tag := t.Field(i).Tag.Get("yaml")
		name, _, _ := strings.Cut(tag, ",")
		if name == "" || name == "-" {
			continue
		}
		keys = append(keys, name)
		index[name] = i
	}
	return keys, index
}

func (d *decoder) decodeStruct(n *yaml.Node, v reflect.Value, path string) {
	if n.Kind != yaml.MappingNode {
		d.errorf(n, path, "want a section (key: value pairs), got %s", describe(n))
		return
	}
	keys, index := fieldsOf(v.Type())
	seen := map[string]bool{}
	for _, kv := range d.merged(n, path) {
		k, val := kv[0], kv[1]
		if k.Kind != yaml.ScalarNode {
			d.errorf(k, path, "want a key name, got %s", describe(k))
			continue
		}
		p := join(path, k.Value)
		fi, ok := index[k.Value]
		if !ok && d.full() {
			continue
		} else if !ok {
			msg := fmt.Sprintf("unknown key %q", k.Value)
			if s := closest(k.Value, keys); s != "" {
				msg += fmt.Sprintf(" (did you mean %q?)", s)
			}
			d.errorf(k, p, "%s; known keys here: %s", msg, strings.Join(keys, ", "))
			continue
		}
		if seen[k.Value] {
			d.errorf(k, p, "key given twice")
			continue
		}
		seen[k.Value] = true
		d.decode(val, v.Field(fi), p)
	}
}

// merged returns a mapping's key/value pairs with YAML merge keys
// ("<<: *base", "<<: [*a, *b]") expanded: merged pairs first, keys given
// explicitly replacing merged ones of the same name (earlier merge sources
// win over later ones, as YAML specifies). Each mapping is expanded once
// (see mergedOf), so neither a chain of anchors that each merge the one
// before several times nor a mapping that merges itself can make the
// expansion unbounded.
func (d *decoder) merged(n *yaml.Node, path string) [][2]*yaml.Node {
	if out, ok := d.mergedOf[n]; ok && out != nil {
		return out
	} else if ok {
		d.errorf(n, path, "<< merges a section into itself")
		return nil
	}
	if d.mergedOf == nil {
		d.mergedOf = map[*yaml.Node][][2]*yaml.Node{}
	}
	d.mergedOf[n] = nil
	var explicit, merged [][2]*yaml.Node
	given, took := map[string]bool{}, map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode || k.Tag != "!!merge" {
			explicit = append(explicit, [2]*yaml.Node{k, val})
			if k.Kind == yaml.ScalarNode {
				given[k.Value] = true
			}
			continue
		}
		sources := []*yaml.Node{val}
		if resolveAlias(val).Kind == yaml.SequenceNode {
			sources = resolveAlias(val).Content
		}
		for _, src := range sources {
			src = resolveAlias(src)
			if src.Kind != yaml.MappingNode {
				d.errorf(val, path, "<< merges a section, got %s", describe(src))
				continue
			}
			for _, kv := range d.merged(src, path) {
				if kv[0].Kind == yaml.ScalarNode && !took[kv[0].Value] {
					took[kv[0].Value] = true
					merged = append(merged, kv)
				}
			}
		}
	}
	out := explicit
	for _, kv := range merged {
		if !given[kv[0].Value] {
			out = append(out, kv)
		}
	}
	if out == nil {
		out = [][2]*yaml.Node{}
	}
	d.mergedOf[n] = out
	return out
}

func resolveAlias(n *yaml.Node) *yaml.Node {
	for n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	return n
}

func (d *decoder) decodeScalar(n *yaml.Node, v reflect.Value, path string) {
	if n.Kind != yaml.ScalarNode {
		d.errorf(n, path, "want %s, got %s", kindName(v.Kind()), describe(n))
		return
	}
	switch v.Kind() {
	case reflect.String:
		v.SetString(n.Value)
	case reflect.Bool:
		if n.Tag != "!!bool" {
			d.errorf(n, path, "want true or false, got %s", describe(n))
			return
		}
		var b bool
		if err := n.Decode(&b); err != nil {
			d.errorf(n, path, "want true or false, got %s", describe(n))
			return
		}
		v.SetBool(b)
	case reflect.Int, reflect.Int64:
		var i int64
		if n.Tag != "!!int" || n.Decode(&i) != nil {
			d.errorf(n, path, "want an integer, got %s", describe(n))
			return
		}
		if v.OverflowInt(i) {
			d.errorf(n, path, "integer %s out of range", n.Value)
			return
		}
		v.SetInt(i)
	case reflect.Uint64:
		var i int64
		if n.Tag != "!!int" {
			d.errorf(n, path, "want a non-negative integer, got %s", describe(n))
			return
		}
		if n.Decode(&i) == nil && i < 0 {
			d.errorf(n, path, "want a non-negative integer, got %s", n.Value)
			return
		}
		var u uint64
		if err := n.Decode(&u); err != nil {
			d.errorf(n, path, "want a non-negative integer below 2^64, got %s", describe(n))
			return
		}
		v.SetUint(u)
	case reflect.Float64:
		var f float64
		if (n.Tag != "!!float" && n.Tag != "!!int") || n.Decode(&f) != nil {
			d.errorf(n, path, "want a number, got %s", describe(n))
			return
		}
		if math.IsNaN(f) || math.IsInf(f, 0) {
			d.errorf(n, path, "want a finite number, got %s", n.Value)
			return
		}
		v.SetFloat(f)
	default:
		d.errorf(n, path, "unsupported field type %s", v.Type()) // a schema bug; a test walks the schema
	}
}

func kindName(k reflect.Kind) string {
	switch k {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int64, reflect.Uint64:
		return "an integer"
	case reflect.Float64:
		return "a number"
	}
	return k.String()
}

// closest returns the key within edit distance 2 of s, if one is.
func closest(s string, keys []string) string {
	best, bestD := "", 3
	for _, k := range keys {
		if dd := editDistance(s, k); dd < bestD {
			best, bestD = k, dd
		}
	}
	return best
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			c := prev[j-1]
			if a[i-1] != b[j-1] {
				c++
			}
			cur[j] = min(c, prev[j]+1, cur[j-1]+1)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// applySet applies the override "a.b.c=value" to the document's root
// mapping: the value (parsed as YAML, so 3, 1e-4, true, [a, b] and null
// keep their types) replaces or adds the key, creating sections on the way.
// A null value removes a key the recipe has (recorded in removed, so a
// problem with its absence names the override); on a key it lacks it is
// added as null, so a misspelt key is still named (and a value field says
// it has nothing to remove).
// The nodes it adds are recorded in marks so errors name the override.
func applySet(root *yaml.Node, set string, marks map[*yaml.Node]string, removed map[string]string) error {
	keyPath, value, ok := strings.Cut(set, "=")
	if !ok || keyPath == "" {
		return fmt.Errorf("want KEY.PATH=VALUE")
	}
	segs := strings.Split(keyPath, ".")
	for _, s := range segs {
		if s == "" {
			return fmt.Errorf("empty key in %q", keyPath)
		}
	}
	var vn yaml.Node
	if err := yaml.Unmarshal([]byte(value), &vn); err != nil {
		return fmt.Errorf("value %q: %v", value, err)
	}
	var val *yaml.Node
	if len(vn.Content) == 0 {
		val = &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: value}
	} else {
		val = vn.Content[0]
	}
	markAll(val, set, marks)
	newKey := func(s string) *yaml.Node {
		k := &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: s}
		marks[k] = set
		return k
	}
	cur, shared := root, false
	for i, s := range segs {
		last := i == len(segs)-1
		at := strings.Join(segs[:i], ".")
		if cur.Kind == yaml.ScalarNode && cur.Tag == "!!null" {
			*cur = yaml.Node{Kind: yaml.MappingNode, Tag: "!!map", Line: cur.Line, Column: cur.Column}
			marks[cur] = set
		}
		switch cur.Kind {
		case yaml.MappingNode:
			found := -1
			for j := 0; j+1 < len(cur.Content); j += 2 {
				if cur.Content[j].Value == s {
					found = j + 1
				}
			}
			switch {
			case found >= 0 && last && isNull(val):
				// null removes the key: the recipe reads as if it had never
				// been written (a default applies, an optional section is
				// gone), which is how a variant drops a built-in's setting.
				cur.Content = slices.Delete(cur.Content, found-1, found+1)
				removed[keyPath] = set // errors about it name the override
			case found >= 0 && last:
				cur.Content[found] = val
			case found >= 0:
				cur, shared = private(cur.Content, found, shared)
			case last && isNull(val) && mergesKey(cur, s, map[*yaml.Node]bool{}):
				// Not "the recipe does not set it": it does, through <<.
				return fmt.Errorf("%s: null removes a key the recipe writes here, and %s comes from a merge key (<<): give it a value instead",
					keyPath, s)
			case last:
				cur.Content = append(cur.Content, newKey(s), val)
			default:
				m := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
				marks[m] = set
				cur.Content = append(cur.Content, newKey(s), m)
				cur = m
			}
		case yaml.SequenceNode:
			idx, err := strconv.Atoi(s)
			if err != nil || idx < 0 || idx > len(cur.Content) {
				return fmt.Errorf("%s is a list of %d; want an index 0..%d, got %q", at, len(cur.Content), len(cur.Content), s)
			}
			if last && isNull(val) {
				// null removes a key; an element the list holds would have
				// been refused as "not set" by the recipe, which it is.
				return fmt.Errorf("%s.%d: null removes a key, not a list element: give the whole list instead (--set %s=[...])", at, idx, at)
			}
			if idx == len(cur.Content) {
				if !last {
					return fmt.Errorf("%s.%d: can only append a whole element", at, idx)
				}
				cur.Content = append(cur.Content, val)
			} else if last {
				cur.Content[idx] = val
			} else {
				cur, shared = private(cur.Content, idx, shared)
			}
		default:
			return fmt.Errorf("%s is a value (%s), not a section", at, describe(cur))
		}
	}
	return nil
}

// private makes content[i] a node of its own before an override changes
// it: an alias is replaced by a copy of its anchor's node, and an anchored
// node by a copy (its aliases keep the original), so --set a.b=c changes
// a.b only, never the sections that share it.
// Below a copied node, every node on the path is copied too (shared says
// so), since the copy's children are still the original's.
func private(content []*yaml.Node, i int, shared bool) (*yaml.Node, bool) {
	n := content[i]
	if !shared && n.Kind != yaml.AliasNode && n.Anchor == "" {
		return n, false
	}
	c := *resolveAlias(n)
	c.Anchor = ""
	c.Content = append([]*yaml.Node(nil), c.Content...)
	content[i] = &c
	return &c, true
}

func markAll(n *yaml.Node, set string, marks map[*yaml.Node]string) {
	marks[n] = set
	for _, c := range n.Content {
		markAll(c, set, marks)
	}
}

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.Tag == "!!null"
}

// mergesKey says whether mapping m takes key through a merge key ("<<:
// *base", "<<: [*a, *b]"), directly or through its sources' own; seen
// keeps a source that merges itself from looping.
func mergesKey(m *yaml.Node, key string, seen map[*yaml.Node]bool) bool {
	m = resolveAlias(m)
	if m.Kind != yaml.MappingNode || seen[m] {
		return false
	}
	seen[m] = true
	for j := 0; j+1 < len(m.Content); j += 2 {
		if k := m.Content[j]; k.Kind != yaml.ScalarNode || k.Tag != "!!merge" {
			continue
		}
		srcs := []*yaml.Node{m.Content[j+1]}
		if v := resolveAlias(m.Content[j+1]); v.Kind == yaml.SequenceNode {
			srcs = v.Content
		}
		for _, src := range srcs {
			src = resolveAlias(src)
			if src.Kind != yaml.MappingNode {
				continue
			}
			for i := 0; i+1 < len(src.Content); i += 2 {
				if src.Content[i].Value == key && src.Content[i].Tag != "!!merge" {
					return true
				}
			}
			if mergesKey(src, key, seen) {
				return true
			}
		}
	}
	return false
}
