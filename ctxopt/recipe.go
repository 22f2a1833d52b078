package ctxopt

import (
	"bytes"
	"context"
	"embed"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/rlnode/rlnode/ctxopt/simlm"
	"github.com/rlnode/rlnode/rollout/engine"
	"github.com/rlnode/rlnode/rollout/episode"
	"github.com/rlnode/rlnode/rollout/native"
	"github.com/rlnode/rlnode/rollout/task"
	"github.com/rlnode/rlnode/rollout/verify"
	"github.com/rlnode/rlnode/rollout/vllm"
)

//go:embed recipes/*.yaml
var builtin embed.FS

// Recipe is a context-optimization run (its own schema, see
// docs/ctxopt.md).
type Recipe struct {
	Name        string `yaml:"name"`
	Description string `yaml:"description"`
	Seed        uint64 `yaml:"seed"`
	Formulation string `yaml:"formulation"` // bandit | multistep | hierarchical
	Executor    struct {
		Engine      string  `yaml:"engine"` // sim | native | openai
		URL         string  `yaml:"url"`    // openai: the server's base URL
		Model       string  `yaml:"model"`  // openai: the served model's name
		Context     int     `yaml:"context"`
		Python      bool    `yaml:"python"`
		SearchURL   string  `yaml:"search_url"`
		Temperature float64 `yaml:"temperature"`
		Workers     int     `yaml:"workers"`
		// LossTimeout is how long an executor actor's calls may fail or go
		// unanswered before it is dropped (a duration such as "15s";
		// PoolOptions.LossTimeout).
		LossTimeout string `yaml:"loss_timeout"`
		// LM is the native engine's model, trained here (lm.go).
		LM *LMConfig `yaml:"lm"`
	} `yaml:"executor"`
	Space struct {
		Tools    []string `yaml:"tools"`
		Budgets  []int    `yaml:"budgets"`
		Atoms    []string `yaml:"atoms"`
		MaxAtoms int      `yaml:"max_atoms"`
	} `yaml:"space"`
	Reward struct {
		Correct     float64 `yaml:"correct"`
		CostWeights `yaml:",inline"`
		ShapeSimple float64 `yaml:"shape_simple"`
	} `yaml:"reward"`
	Data struct {
		Kinds        []string `yaml:"kinds"`
		Levels       []int    `yaml:"levels"`
		TrainPerType int      `yaml:"train_per_type"`
		EvalPerType  int      `yaml:"eval_per_type"`
	} `yaml:"data"`
	Train struct {
		Iterations int `yaml:"iterations"`
		Batch      int `yaml:"batch"`
	} `yaml:"train"`
	EmbedDim int `yaml:"embed_dim"`
	// Embed is the question features: ngram (hashed, embed_dim) or lm
	// (the executor model's mean-pooled hidden states; native engine).
	Embed     string   `yaml:"embed"`
	PPO       PPOYAML  `yaml:"ppo"`
	Structure *PPOYAML `yaml:"structure_ppo"`
	Prompt    *PPOYAML `yaml:"prompt_ppo"`

	file        string
	source      []byte
	root        *yaml.Node
	lossTimeout time.Duration // executor.loss_timeout; 0: unset
}

// PPOYAML is a learner's PPO section.
type PPOYAML struct {
	LR          float64 `yaml:"lr"`
	EntropyCoef float64 `yaml:"entropy_coef"`
	Clip        float64 `yaml:"clip"`
	Epochs      int     `yaml:"epochs"`
	MaxGradNorm float64 `yaml:"max_grad_norm"`
	ValueCoef   float64 `yaml:"value_coef"`
	Gamma       float64 `yaml:"gamma"`
	Hidden      []int   `yaml:"hidden"`
}

func (p PPOYAML) config() PPOConfig {
	return PPOConfig{LR: p.LR, EntropyCoef: p.EntropyCoef, Clip: p.Clip, Epochs: p.Epochs, MaxGradNorm: p.MaxGradNorm, ValueCoef: p.ValueCoef, Gamma: p.Gamma, Lambda: 1, Hidden: p.Hidden}
}

// Builtins lists the built-in recipe names.
func Builtins() []string {
	es, _ := builtin.ReadDir("recipes")
	var out []string
	for _, e := range es {
		out = append(out, strings.TrimSuffix(e.Name(), ".yaml"))
	}
	sort.Strings(out)
	return out
}

// MaxIterations bounds train.iterations, and MaxPerType
// data.train_per_type and data.eval_per_type (questions per type), in a
// recipe as in the command's overrides.
const (
	MaxIterations = 100000
	MaxPerType    = 10000
)

// maxRecipeBytes bounds a recipe file.
const maxRecipeBytes = 1 << 20

// Bounds on the configuration space: the policies' heads and inputs, and
// the benchmark's fixed configurations, grow with them.
const (
	maxAtoms   = 256
	maxBudgets = 16
)

// LoadRecipe reads a built-in recipe by name or a file by path, and
// validates it.
func LoadRecipe(nameOrPath string) (*Recipe, error) {
	var b []byte
	var err error
	file := nameOrPath
	if !strings.ContainsAny(nameOrPath, "/.") {
		file = "ctxopt/recipes/" + nameOrPath + ".yaml"
		b, err = builtin.ReadFile("recipes/" + nameOrPath + ".yaml")
		if err != nil {
			return nil, fmt.Errorf("no built-in context-optimization recipe %q (built-in: %s)", nameOrPath, strings.Join(Builtins(), ", "))
		}
	} else {
		if b, err = readBounded(nameOrPath, maxRecipeBytes); err != nil {
			return nil, fmt.Errorf("recipe %s: %w", nameOrPath, err)
		}
	}
	return ParseRecipe(file, b)
}

// readBounded reads the file at path, refusing one over limit bytes: by
// its size when it is a regular file, and by what it gives when it is not
// (a pipe, a device, a /proc file, whose size says nothing).
func readBounded(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if pe := (*os.PathError)(nil); errors.As(err, &pe) {
		err = pe.Err // the caller's message names the file already
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	switch {
	case err != nil:
		return nil, err
	case st.IsDir():
		return nil, errors.New("a directory, not a file")
	case st.Mode().IsRegular() && st.Size() > limit:
		return nil, fmt.Errorf("%d bytes, more than %d", st.Size(), limit)
	}
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("more than %d bytes", limit)
	}
	return b, nil
}

var yamlLineRE = regexp.MustCompile(`^yaml: (?:unmarshal errors:\n\s*)?line (\d+): (.*)`)

// ParseRecipe decodes and validates a recipe; every error is "FILE:LINE:
// field: message".
func ParseRecipe(file string, b []byte) (*Recipe, error) {
	r := &Recipe{file: filepath.Clean(file), source: slices.Clone(b)}
	var root yaml.Node
	if err := yaml.Unmarshal(b, &root); err != nil {
		return nil, r.yamlErr(err)
	}
	r.root = &root
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	var decodeErrs []error
	badLines := map[int]bool{}
	if err := dec.Decode(r); errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%s: empty recipe", r.file)
	} else if te := (*yaml.TypeError)(nil); errors.As(err, &te) {
		// yaml goes on past unknown keys and wrong types, so the checks
		// below still see every field it could decode.
		for _, msg := range te.Errors {
			line, e := r.typeErr(msg)
			badLines[line] = true
			decodeErrs = append(decodeErrs, e)
		}
	} else if err != nil {
		return nil, r.yamlErr(err)
	}
	if err := r.validate(); err != nil || len(decodeErrs) > 0 {
		// A field yaml could not decode keeps its zero value: the checks'
		// complaint about that zero would only repeat the first error.
		errs := decodeErrs
		for _, e := range unjoin(err) {
			var le lineError
			if !errors.As(e, &le) || !badLines[le.line] {
				errs = append(errs, e)
			}
		}
		return nil, errors.Join(errs...)
	}
	return r, nil
}

// typeErr turns one of yaml's decoding errors ("line 14: field bogus not
// found in type struct {…}", "line 42: cannot unmarshal !!str `x` into
// int") into FILE:LINE: field: message, the field by its dotted path.
func (r *Recipe) typeErr(msg string) (int, error) {
	m := typeErrRE.FindStringSubmatch(msg)
	if m == nil {
		return 0, fmt.Errorf("%s: %s", r.file, msg)
	}
	line, _ := strconv.Atoi(m[1])
	text := m[2]
	if f := unknownFieldRE.FindStringSubmatch(text); f != nil {
		text = "unknown key"
	}
	if path := r.pathAt(line); path != "" {
		return line, fmt.Errorf("%s:%d: %s: %s", r.file, line, path, text)
	}
	return line, fmt.Errorf("%s:%d: %s", r.file, line, text)
}

var (
	typeErrRE      = regexp.MustCompile(`^line (\d+): (.*)`)
	unknownFieldRE = regexp.MustCompile(`^field (\S+) not found in type `)
)

// pathAt is the dotted path of the key on line (list elements by index),
// the innermost when several are on it; "" when no key is.
func (r *Recipe) pathAt(line int) string {
	var best string
	var walk func(n *yaml.Node, path string)
	walk = func(n *yaml.Node, path string) {
		switch n.Kind {
		case yaml.DocumentNode:
			for _, c := range n.Content {
				walk(c, path)
			}
		case yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				p := n.Content[i].Value
				if path != "" {
					p = path + "." + p
				}
				if n.Content[i].Line == line {
					best = p
				}
				walk(n.Content[i+1], p)
			}
		case yaml.SequenceNode:
			for i, c := range n.Content {
				walk(c, fmt.Sprintf("%s.%d", path, i))
			}
		}
	}
	if r.root != nil {
		walk(r.root, "")
	}
	return best
}

// lineError is a check's error with the line it names.
type lineError struct {
	line int
	msg  string
}

func (e lineError) Error() string { return e.msg }

func unjoin(err error) []error {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

func (r *Recipe) yamlErr(err error) error {
	if m := yamlLineRE.FindStringSubmatch(err.Error()); m != nil {
		return fmt.Errorf("%s:%s: %s", r.file, m[1], strings.Split(m[2], "\n")[0])
	}
	return fmt.Errorf("%s: %w", r.file, err)
}

// line finds the line of a dotted path (list elements by index); the
// deepest existing prefix's line when the path is absent.
func (r *Recipe) line(path string) int {
	n := r.root
	if n == nil {
		return 0
	}
	if n.Kind == yaml.DocumentNode && len(n.Content) > 0 {
		n = n.Content[0]
	}
	line := n.Line
	for _, key := range strings.Split(path, ".") {
		var next *yaml.Node
		switch n.Kind {
		case yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				if n.Content[i].Value == key {
					next = n.Content[i+1]
					line = n.Content[i].Line
				}
			}
		case yaml.SequenceNode:
			if i, err := strconv.Atoi(key); err == nil && i >= 0 && i < len(n.Content) {
				next = n.Content[i]
				line = next.Line
			}
		}
		if next == nil {
			return line
		}
		n = next
	}
	return line
}

func (r *Recipe) errf(path, format string, args ...any) error {
	line := r.line(path)
	return lineError{line, fmt.Sprintf("%s:%d: %s: %s", r.file, line, path, fmt.Sprintf(format, args...))}
}

// ContextTokens is the executor model's context length.
func (r *Recipe) ContextTokens() int {
	switch r.Executor.Engine {
	case "sim":
		return simlm.ContextTokens
	case "native":
		if r.Executor.LM != nil {
			return r.Executor.LM.Context
		}
	}
	return r.Executor.Context
}

func (r *Recipe) validate() error {
	var errs []error
	add := func(path, format string, args ...any) { errs = append(errs, r.errf(path, format, args...)) }
	if r.Name == "" {
		add("name", "missing")
	}
	if !slices.Contains([]string{"bandit", "multistep", "hierarchical"}, r.Formulation) {
		add("formulation", "%q: want bandit, multistep or hierarchical", r.Formulation)
	}
	switch r.Executor.Engine {
	case "sim":
	case "native":
		if r.Executor.LM == nil {
			add("executor.lm", "the native engine needs the executor model's section lm")
		} else if err := r.Executor.LM.Check(); err != nil {
			add("executor.lm", "%v", err)
		}
	case "openai":
		if r.Executor.URL == "" {
			add("executor.url", "the openai engine needs the server's URL")
		} else if u, err := url.Parse(r.Executor.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			add("executor.url", "%q: want http(s)://host:port", r.Executor.URL)
		} else if strings.HasSuffix(strings.TrimRight(r.Executor.URL, "/"), "/v1") {
			// as the client (rollout/vllm) takes it, which adds /v1/...
			add("executor.url", "%q: give the server's base URL, without /v1", r.Executor.URL)
		}
		if r.Executor.Model == "" {
			add("executor.model", "the openai engine needs the served model's name (GET /v1/models lists them)")
		}
		if r.Executor.Context <= 0 {
			add("executor.context", "the openai engine needs the model's context length in tokens")
		}
	default:
		add("executor.engine", "%q: want sim, native or openai", r.Executor.Engine)
	}
	if s := r.Executor.SearchURL; s != "" {
		if u, err := url.Parse(s); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			add("executor.search_url", "%q: want http(s)://host[:port][/path]", s)
		}
	}
	if r.Executor.LM != nil && r.Executor.Engine != "native" {
		add("executor.lm", "only the native engine trains an executor model")
	}
	if r.Executor.Workers < 0 || r.Executor.Workers > 256 {
		add("executor.workers", "%d not in 0..256", r.Executor.Workers)
	}
	if r.Executor.LossTimeout != "" {
		d, err := time.ParseDuration(r.Executor.LossTimeout)
		switch {
		case err != nil:
			add("executor.loss_timeout", "%q: want a duration such as 15s", r.Executor.LossTimeout)
		case d < time.Second || d > time.Hour:
			add("executor.loss_timeout", "%v not in 1s..1h", d)
		default:
			r.lossTimeout = d
		}
	}
	if !(r.Executor.Temperature >= 0 && r.Executor.Temperature <= 2) {
		add("executor.temperature", "%v not in [0, 2]", r.Executor.Temperature)
	}
	if len(r.Space.Atoms) == 0 {
		add("space.atoms", "the prompt-atom library is empty: give at least one atom")
	}
	if len(r.Space.Atoms) > maxAtoms {
		add("space.atoms", "%d atoms, at most %d", len(r.Space.Atoms), maxAtoms)
	}
	for i, a := range r.Space.Atoms {
		if strings.TrimSpace(a) == "" || len(a) > 500 {
			add(fmt.Sprintf("space.atoms.%d", i), "an atom must be non-empty text of at most 500 bytes")
		}
	}
	if r.Space.MaxAtoms < 1 || len(r.Space.Atoms) > 0 && r.Space.MaxAtoms > len(r.Space.Atoms) {
		add("space.max_atoms", "%d not in 1..%d (the library's size)", r.Space.MaxAtoms, len(r.Space.Atoms))
	}
	if len(r.Space.Budgets) == 0 {
		add("space.budgets", "no token budgets")
	}
	if len(r.Space.Budgets) > maxBudgets {
		add("space.budgets", "%d budgets, at most %d", len(r.Space.Budgets), maxBudgets)
	}
	ctx := r.ContextTokens()
	for i, b := range r.Space.Budgets {
		switch {
		case slices.Index(r.Space.Budgets, b) != i:
			add(fmt.Sprintf("space.budgets.%d", i), "budget %d listed twice", b)
		case b <= 0:
			add(fmt.Sprintf("space.budgets.%d", i), "budget %d must be positive", b)
		case ctx > 0 && b > ctx/2:
			add(fmt.Sprintf("space.budgets.%d", i), "budget %d tokens leaves under half of the model's %d-token context for the prompt", b, ctx)
		}
	}
	if len(r.Space.Tools) > 3 {
		add("space.tools", "%d tools, at most 3", len(r.Space.Tools))
	}
	for i, t := range r.Space.Tools {
		p := fmt.Sprintf("space.tools.%d", i)
		switch {
		case !slices.Contains(KnownTools, t):
			add(p, "unknown tool %q (known: %s)", t, strings.Join(KnownTools, ", "))
		case slices.Index(r.Space.Tools, t) != i:
			add(p, "tool %q listed twice", t)
		case t == ToolSearch && r.Executor.SearchURL == "":
			add(p, "the search tool needs executor.search_url")
		case t == ToolPython && !r.Executor.Python:
			add(p, "the python tool needs executor.python: true")
		}
	}
	if !(r.Reward.Correct > 0) || math.IsInf(r.Reward.Correct, 0) {
		add("reward.correct", "%v must be a positive number", r.Reward.Correct)
	}
	for _, w := range []struct {
		path string
		v    float64
	}{{"reward.prompt_token", r.Reward.PromptToken}, {"reward.completion_token", r.Reward.CompletionToken}, {"reward.tool_call", r.Reward.ToolCall}, {"reward.model_call", r.Reward.ModelCall}, {"reward.shape_simple", r.Reward.ShapeSimple}} {
		if !(w.v >= 0 && w.v < 100) {
			add(w.path, "%v not in [0, 100)", w.v)
		}
	}
	for i, k := range r.Data.Kinds {
		switch {
		case !slices.Contains(task.Kinds, k):
			add(fmt.Sprintf("data.kinds.%d", i), "unknown task kind %q (want one of %s)", k, strings.Join(task.Kinds, ", "))
		case slices.Index(r.Data.Kinds, k) != i:
			add(fmt.Sprintf("data.kinds.%d", i), "task kind %q listed twice", k)
		}
	}
	if len(r.Data.Kinds) == 0 {
		add("data.kinds", "no task kinds")
	}
	if len(r.Data.Levels) == 0 {
		add("data.levels", "no levels")
	}
	for i, l := range r.Data.Levels {
		switch {
		case l < 1 || l > task.MaxLevel:
			add(fmt.Sprintf("data.levels.%d", i), "level %d not in 1..%d", l, task.MaxLevel)
		case slices.Index(r.Data.Levels, l) != i:
			add(fmt.Sprintf("data.levels.%d", i), "level %d listed twice", l)
		}
	}
	if r.Data.TrainPerType < 1 || r.Data.TrainPerType > MaxPerType {
		add("data.train_per_type", "%d not in 1..%d", r.Data.TrainPerType, MaxPerType)
	}
	if r.Data.EvalPerType < 1 || r.Data.EvalPerType > MaxPerType {
		add("data.eval_per_type", "%d not in 1..%d", r.Data.EvalPerType, MaxPerType)
	}
	if r.Train.Iterations < 1 || r.Train.Iterations > MaxIterations {
		add("train.iterations", "%d not in 1..%d", r.Train.Iterations, MaxIterations)
	}
	if r.Train.Batch < 1 || r.Train.Batch > 4096 {
		add("train.batch", "%d not in 1..4096", r.Train.Batch)
	}
	switch r.Embed {
	case "", "ngram":
	case "lm":
		if r.Executor.Engine != "native" {
			add("embed", "lm features need the executor model of engine native")
		}
	default:
		add("embed", "%q: want ngram or lm", r.Embed)
	}
	if r.EmbedDim < 4 || r.EmbedDim > 4096 {
		add("embed_dim", "%d not in 4..4096", r.EmbedDim)
	}
	checkPPO := func(path string, p PPOYAML) {
		if err := p.config().Check(); err != nil {
			add(path, "%s", strings.TrimPrefix(err.Error(), "ppo: "))
		}
	}
	if r.Formulation == "hierarchical" {
		if r.Structure == nil || r.Prompt == nil {
			add("formulation", "hierarchical needs structure_ppo and prompt_ppo sections")
		} else {
			checkPPO("structure_ppo", *r.Structure)
			checkPPO("prompt_ppo", *r.Prompt)
		}
	} else {
		checkPPO("ppo", r.PPO)
	}
	return errors.Join(errs...)
}

// Space is the recipe's configuration space.
func (r *Recipe) SpaceOf() Space {
	return Space{Tools: r.Space.Tools, Budgets: r.Space.Budgets, Atoms: r.Space.Atoms, MaxAtoms: r.Space.MaxAtoms}
}

// Method builds the recipe's formulation with fresh weights. With lm
// features it loads the executor model, giving up once ctx is done.
func (r *Recipe) Method(ctx context.Context) (Method, error) {
	rng := rand.New(rand.NewPCG(r.Seed, 0xc0f1))
	emb := NewEmbedder(r.EmbedDim)
	if r.Embed == "lm" {
		var err error
		if emb, err = r.lmEmbedder(ctx); err != nil {
			return nil, err
		}
	}
	sp := r.SpaceOf()
	switch r.Formulation {
	case "bandit":
		return NewBandit(sp, emb, r.PPO.config(), rng)
	case "multistep":
		return NewMultiStep(sp, emb, r.PPO.config(), r.Reward.ShapeSimple, rng)
	default:
		return NewHierarchical(sp, emb, r.Structure.config(), r.Prompt.config(), rng)
	}
}

// Questions returns the recipe's train and held-out questions.
func (r *Recipe) Questions() (trainQs, heldOut []Question, err error) {
	if trainQs, err = Questions(r.Seed, task.Train, r.Data.Kinds, r.Data.Levels, r.Data.TrainPerType); err != nil {
		return nil, nil, err
	}
	heldOut, err = Questions(r.Seed, task.HeldOut, r.Data.Kinds, r.Data.Levels, r.Data.EvalPerType)
	return trainQs, heldOut, err
}

// NewExecutor builds the recipe's executor: its engine (the scripted model,
// or the OpenAI-compatible server, checked to be up and serving the
// model), the GSM8K verifier, the Python sandbox and the search endpoint
// when the recipe asks for them.
func (r *Recipe) NewExecutor(ctx context.Context) (*Executor, error) {
	var eng engine.Engine = simlm.Engine{}
	if r.Executor.Engine == "native" {
		e, err := r.ExecutorLM(ctx)
		if err != nil {
			return nil, err
		}
		eng = e
	}
	if r.Executor.Engine == "openai" {
		c, err := vllm.New(ctx, vllm.Config{Servers: []string{r.Executor.URL}, Model: r.Executor.Model})
		if err != nil {
			return nil, err
		}
		eng = c
	}
	x := &Executor{Engine: eng, Verifier: verify.GSM8K{}, Space: r.SpaceOf(), Cost: r.Reward.CostWeights,
		CorrectReward: r.Reward.Correct, Temperature: r.Executor.Temperature, Workers: r.Executor.Workers,
		Memo: r.Executor.Engine == "native" && r.Executor.Temperature == 0}
	if r.Executor.Python {
		sb, err := verify.NewSandbox(verify.SandboxConfig{})
		if err != nil {
			eng.Close()
			return nil, fmt.Errorf("python tool: %w (set executor.python: false to run without it)", err)
		}
		x.Python = episode.SandboxPython{Sandbox: sb}
	}
	if r.Executor.SearchURL != "" {
		x.Search = HTTPSearch{URL: r.Executor.SearchURL}
	}
	return x, nil
}

// ExecutorLM returns the native engine over the recipe's executor model,
// trained into the cache first when it is not there (progress on stderr).
func (r *Recipe) ExecutorLM(ctx context.Context) (*native.Engine, error) {
	if r.Executor.LM == nil {
		return nil, fmt.Errorf("%s: executor.lm: the recipe has no executor model", r.file)
	}
	dir, err := EnsureLM(ctx, *r.Executor.LM, r.SpaceOf(), r.Executor.Python, os.Stderr)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", r.file, err)
	}
	e, err := LoadLM(ctx, dir)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", r.file, err)
	}
	return e, nil
}

// WarmUp returns the directory of the recipe's executor model, training
// it into the cache first when it is not there (EnsureLM); progress goes
// to log. A recipe without executor.lm has none to warm up.
func (r *Recipe) WarmUp(ctx context.Context, log io.Writer) (string, error) {
	if r.Executor.LM == nil {
		return "", fmt.Errorf("%s: executor.lm: the recipe's engine %q has no executor model to train", r.file, r.Executor.Engine)
	}
	return EnsureLM(ctx, *r.Executor.LM, r.SpaceOf(), r.Executor.Python, log)
}

// lmEmbedder embeds with the executor model's hidden states, the recipe's
// questions computed up front.
func (r *Recipe) lmEmbedder(ctx context.Context) (*Embedder, error) {
	dir, err := EnsureLM(ctx, *r.Executor.LM, r.SpaceOf(), r.Executor.Python, os.Stderr)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", r.file, err)
	}
	src, err := LoadLMFeatures(ctx, dir)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", r.file, err)
	}
	emb := NewSourceEmbedder(src)
	trainQs, heldOut, err := r.Questions()
	if err != nil {
		return nil, err
	}
	if err := emb.Prepare(append(trainQs, heldOut...)); err != nil {
		return nil, fmt.Errorf("%s: embed: %w", r.file, err)
	}
	return emb, nil
}
