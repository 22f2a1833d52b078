package recipes

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// Loaded is a recipe with where each of its values came from.
type Loaded struct {
	*Recipe
	// Source is the file name, or "builtin:NAME" for a built-in recipe.
	Source string
	// Sets are the --set overrides applied, in order.
	Sets []string

	pos      map[string]Pos
	removed  map[string]string // paths a --set KEY=null removed → the override
	relative []RelPath
}

// RelPath is a path a recipe (or a --set override) wrote relative, and
// where it resolved.
type RelPath struct {
	Field    string // as "data.dataset.train"
	Written  string
	Resolved string
	Set      bool // written by a --set override
}

// RelativePaths lists the recipe's relative paths in field order: a job
// sent with a working dir checks that none leads out of the folder.
func (l *Loaded) RelativePaths() []RelPath {
	return append([]RelPath(nil), l.relative...)
}

// Pos is where the value at path (as "algorithm.lr") came from; ok is
// false for values left at their defaults.
func (l *Loaded) Pos(path string) (Pos, bool) {
	p, ok := l.pos[path]
	return p, ok
}

// Load reads a recipe by built-in name (see Builtins) or by file path,
// applies the --set overrides, fills the defaults and validates it. Every
// problem found is reported at once, as Errors (errors.Is(err, ErrInvalid)).
// A name that is neither a built-in recipe nor a file is an error naming
// the built-in recipes.
func Load(nameOrPath string, sets []string) (*Loaded, error) {
	return LoadIn(nameOrPath, sets, "")
}

// LoadIn is Load with the relative paths of the --set overrides relative
// to setsDir (the working directory when empty): a node reading a recipe
// submitted with a working directory resolves them in its copy.
func LoadIn(nameOrPath string, sets []string, setsDir string) (*Loaded, error) {
	if b, ok := builtin(nameOrPath); ok {
		dir, err := builtinDataDir()
		if err != nil {
			return nil, err
		}
		all := append(append([]string{}, b.sets...), sets...)
		l, err := parse("builtin:"+b.file, b.src, dir, setsDir, all)
		if l != nil {
			l.Source, l.Sets = "builtin:"+nameOrPath, append([]string{}, sets...)
		}
		return l, err
	}
	src, err := ReadFile(nameOrPath)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) && !strings.ContainsAny(nameOrPath, "/.") {
			return nil, fmt.Errorf("recipe %q: no such file, and no built-in recipe by that name (built-in: %s)", nameOrPath, strings.Join(BuiltinNames(), ", "))
		}
		return nil, fmt.Errorf("recipe: %w", err)
	}
	dir, err := filepath.Abs(filepath.Dir(nameOrPath))
	if err != nil {
		return nil, fmt.Errorf("recipe %s: %w", nameOrPath, err)
	}
	return parse(nameOrPath, src, dir, setsDir, sets)
}

// MaxRecipeBytes bounds a recipe file: a recipe is a page of YAML, and a
// dataset passed by mistake must not be parsed as one.
const MaxRecipeBytes = 1 << 20

// ReadFile reads the recipe file at path: a regular file (a pipe would
// block the reader) of at most MaxRecipeBytes.
func ReadFile(path string) ([]byte, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	switch {
	case st.IsDir():
		return nil, fmt.Errorf("%s is a directory, not a recipe file", path)
	case !st.Mode().IsRegular():
		return nil, fmt.Errorf("%s is not a regular file (%s), not a recipe file", path, st.Mode().Type())
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	src, err := io.ReadAll(io.LimitReader(f, MaxRecipeBytes+1))
	if err != nil {
		return nil, err
	}
	if len(src) > MaxRecipeBytes {
		return nil, fmt.Errorf("%s is over %d bytes: not a recipe (a dataset goes in data.dataset.train)", path, MaxRecipeBytes)
	}
	return src, nil
}

// Parse loads a recipe from src; file names it in errors, relative paths
// in it are relative to dir (the working directory when dir is empty).
func Parse(file string, src []byte, dir string, sets []string) (*Loaded, error) {
	return parse(file, src, dir, "", sets)
}

// ParseIn is Parse with the relative paths of the --set overrides
// relative to setsDir (the working directory when empty).
func ParseIn(file string, src []byte, dir, setsDir string, sets []string) (*Loaded, error) {
	return parse(file, src, dir, setsDir, sets)
}

var yamlLine = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

func parse(file string, src []byte, dir, setsDir string, sets []string) (*Loaded, error) {
	d := &decoder{file: file, sets: map[*yaml.Node]string{}, pos: map[string]Pos{}}
	fileErr := func(err error) error {
		msg := err.Error()
		if m := yamlLine.FindStringSubmatch(msg); m != nil {
			line, _ := strconv.Atoi(m[1])
			text := m[2]
			// yaml.v3 numbers the lines of its parser's errors ("did not
			// find expected ...") from 0, its scanner's from 1.
			if strings.HasPrefix(text, "did not find expected") {
				line++
			}
			if strings.HasPrefix(text, "did not find expected ',' or") {
				text += " (the [ ] or { } that opens on this line is not closed, or lacks a comma)"
			}
			if lines := bytes.Split(src, []byte("\n")); text == "found character that cannot start any token" &&
				line >= 1 && line <= len(lines) && bytes.ContainsRune(lines[line-1], '\t') {
				text += " (a tab: YAML indents with spaces)"
			}
			return Errors{{Pos: Pos{File: file, Line: line}, Msg: "YAML: " + text}}
		}
		return Errors{{Pos: Pos{File: file}, Msg: "YAML: " + strings.TrimPrefix(msg, "yaml: ")}}
	}
	dec := yaml.NewDecoder(bytes.NewReader(src))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil && err != io.EOF {
		return nil, fileErr(err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		return nil, Errors{{Pos: Pos{File: file, Line: extra.Line}, Msg: "more than one YAML document; a recipe is one"}}
	} else if err != io.EOF {
		return nil, fileErr(err)
	}
	root := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map", Line: 1}
	if len(doc.Content) > 0 {
		root = doc.Content[0]
	}
	if root.Kind == yaml.ScalarNode && root.Tag == "!!null" {
		root = &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map", Line: 1}
	}
	if root.Kind != yaml.MappingNode {
		return nil, Errors{{Pos: Pos{File: file, Line: root.Line}, Msg: "want a recipe (key: value pairs), got " + describe(root)}}
	}
	removed := map[string]string{}
	for _, s := range sets {
		if err := applySet(root, s, d.sets, removed); err != nil {
			d.errs = append(d.errs, &Error{Pos: Pos{File: file, Set: s}, Msg: err.Error()})
		}
	}
	r := Default()
	d.decode(root, reflect.ValueOf(r).Elem(), "")
	l := &Loaded{Recipe: r, Source: file, Sets: append([]string{}, sets...), pos: d.pos, removed: removed}
	{
		// A field that failed to decode keeps its default; the checks below
		// skip problems on or around it so one mistake is reported once.
		failed := map[string]bool{}
		for _, e := range d.errs {
			failed[e.Path] = true
		}
		if r.Name == "" {
			r.Name = strings.TrimSuffix(filepath.Base(strings.TrimPrefix(file, "builtin:")), filepath.Ext(file))
		}
		r.resolve(dir, setsDir, l.isSet, l.fromSet, func(path, written, resolved string) {
			l.relative = append(l.relative, RelPath{Field: path, Written: written, Resolved: resolved, Set: l.fromSet(path)})
		})
		for _, p := range r.validate(l.isSet) {
			if !related(failed, p.Path) {
				d.errs = append(d.errs, l.at(p))
			}
		}
	}
	if len(d.errs) > 0 {
		d.errs.sort()
		if d.dropped > 0 {
			d.errs = append(d.errs, &Error{Pos: Pos{File: file}, Msg: fmt.Sprintf("and %d more problems not shown", d.dropped), More: d.dropped})
		}
		return nil, d.errs
	}
	return l, nil
}

// Problem is a value a check refuses: the dotted path it concerns (as
// "engines.policy.replicas"; "" for the recipe as a whole) and why.
type Problem struct{ Path, Msg string }

// Refuse turns the problems a check outside this package found in l into
// Errors at the positions their paths came from (the value's line, or the
// nearest section the file or an override sets, or the file), in file
// order, the overrides' last; nil when there are none.
func (l *Loaded) Refuse(probs []Problem) error {
	if len(probs) == 0 {
		return nil
	}
	es := make(Errors, len(probs))
	for i, p := range probs {
		es[i] = l.at(p)
	}
	es.sort()
	return es
}

func (l *Loaded) at(p Problem) *Error {
	return &Error{Pos: l.nearest(p.Path), Path: p.Path, Msg: p.Msg}
}

// related tells whether path is a failed path, or inside or around one.
func related(failed map[string]bool, path string) bool {
	for f := range failed {
		if f == "" || f == path || strings.HasPrefix(path, f+".") || strings.HasPrefix(f, path+".") {
			return true
		}
	}
	return false
}

func (l *Loaded) fromSet(path string) bool { return l.pos[path].Set != "" }

func (l *Loaded) isSet(path string) bool {
	_, ok := l.pos[path]
	return ok
}

// nearest is the position of path, or of its closest ancestor that the
// file sets (or that a --set KEY=null removed: that override), or the
// file itself.
func (l *Loaded) nearest(path string) Pos {
	for p := path; p != ""; {
		if pos, ok := l.pos[p]; ok {
			return pos
		}
		if set, ok := l.removed[p]; ok {
			return Pos{File: l.Source, Set: set}
		}
		i := strings.LastIndex(p, ".")
		if i < 0 {
			break
		}
		p = p[:i]
	}
	return Pos{File: l.Source}
}

// WriteResolved writes the recipe with every default filled in, as YAML
// that loads back to the same recipe: what the run directory keeps.
func (l *Loaded) WriteResolved(w io.Writer) error {
	var b bytes.Buffer
	fmt.Fprintf(&b, "# resolved recipe: %s", commentText(l.Source))
	for _, s := range l.Sets {
		fmt.Fprintf(&b, " --set %s", commentText(s))
	}
	b.WriteString("\n# every default filled in; `rlnode run` on this file repeats the run.\n")
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(encodeNode(reflect.ValueOf(l.Recipe))); err != nil {
		return fmt.Errorf("write resolved recipe: %w", err)
	}
	if err := enc.Close(); err != nil {
		return fmt.Errorf("write resolved recipe: %w", err)
	}
	_, err := w.Write(b.Bytes())
	return err
}

// commentText is s for a YAML comment line: quoted, escapes and all, when
// it holds a line break (a file name or --set value may), which would end
// the comment and turn the rest into YAML.
func commentText(s string) string {
	if strings.ContainsAny(s, "\n\r\u0085\u2028\u2029") {
		return strconv.Quote(s)
	}
	return s
}

// ResolvedFile is the name of the resolved recipe in a run directory.
const ResolvedFile = "recipe.yaml"

// SaveResolved writes the resolved recipe to dir/recipe.yaml (atomically:
// a temporary file renamed into place) and returns its path.
func (l *Loaded) SaveResolved(dir string) (string, error) {
	var b bytes.Buffer
	if err := l.WriteResolved(&b); err != nil {
		return "", err
	}
	path := filepath.Join(dir, ResolvedFile)
	tmp, err := os.CreateTemp(dir, ".recipe-*.yaml")
	if err != nil {
		return "", fmt.Errorf("save resolved recipe: %w", err)
	}
	_, werr := tmp.Write(b.Bytes())
	cerr := tmp.Close()
	if werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = os.Rename(tmp.Name(), path)
	}
	if werr != nil {
		os.Remove(tmp.Name())
		return "", fmt.Errorf("save resolved recipe %s: %w", path, werr)
	}
	return path, nil
}

// encodeNode turns a schema value into YAML nodes. yaml.v3's own encoder
// drops a string's leading newline (the tool_response template has one),
// so the resolved recipe is built node by node: strings with blank edges
// are double-quoted, other multi-line strings are literal blocks.
func encodeNode(v reflect.Value) *yaml.Node {
	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() {
			return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!null", Value: "null"}
		}
		return encodeNode(v.Elem())
	case reflect.Struct:
		n := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
		for i := 0; i < v.NumField(); i++ {
			name, opts, _ := strings.Cut(v.Type().Field(i).Tag.Get("yaml"), ",")
			f := v.Field(i)
			if name == "" || name == "-" || opts == "omitempty" && f.IsZero() {
				continue
			}
			n.Content = append(n.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: name}, encodeNode(f))
		}
		return n
	case reflect.Slice:
		n := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
		if v.Len() > 0 && v.Index(0).Kind() == reflect.String {
			n.Style = yaml.FlowStyle
		}
		for i := 0; i < v.Len(); i++ {
			n.Content = append(n.Content, encodeNode(v.Index(i)))
		}
		return n
	case reflect.Map:
		n := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
		keys := v.MapKeys()
		sort.Slice(keys, func(i, j int) bool { return keys[i].String() < keys[j].String() })
		for _, k := range keys {
			n.Content = append(n.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: k.String()}, encodeNode(v.MapIndex(k)))
		}
		return n
	case reflect.String:
		n := &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: v.String()}
		switch s := v.String(); {
		case s != strings.TrimSpace(s):
			n.Style = yaml.DoubleQuotedStyle
		case strings.Contains(s, "\n"):
			n.Style = yaml.LiteralStyle
		}
		return n
	case reflect.Bool:
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!bool", Value: strconv.FormatBool(v.Bool())}
	case reflect.Int, reflect.Int64:
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: strconv.FormatInt(v.Int(), 10)}
	case reflect.Uint64:
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: strconv.FormatUint(v.Uint(), 10)}
	case reflect.Float64:
		s := strconv.FormatFloat(v.Float(), 'g', -1, 64)
		if !strings.ContainsAny(s, ".eEn") {
			s += ".0"
		}
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!float", Value: s}
	}
	panic(fmt.Sprintf("recipes: encode: unsupported type %s", v.Type())) // the schema has none; a test encodes every built-in
}
