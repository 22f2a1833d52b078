package driver

import (
	"fmt"
	"log/slog"
	"strings"
	"text/template"

	"github.com/rlnode/rlnode/cluster"
	"github.com/rlnode/rlnode/learner"
	"github.com/rlnode/rlnode/learner/model"
	"github.com/rlnode/rlnode/rollout/engine"
	"github.com/rlnode/rlnode/rollout/task"
)

// Config is everything the training loop needs. Recipes map onto it;
// Quickstart is the tuned preset. Zero fields are errors unless their
// comment gives a default.
type Config struct {
	// Out is the run directory: metrics.jsonl, checkpoints/step-N/.
	Out string
	// Seed drives model init, data order and sampling.
	Seed uint64

	// Model is the architecture of a policy trained from scratch (random
	// init with Seed); ModelDir a checkpoint to start from instead
	// (config.json, safetensors, tokenizer.json). Exactly one is set. From
	// scratch, the tokenizer is tokenizer.BuiltinSized(Model.VocabSize).
	Model    *model.Config
	ModelDir string

	// Learner configures the RL phase: algorithm, optimizer, loss,
	// micro-batching. Its Model/ModelDir/Seed are filled from the fields
	// above.
	Learner learner.Config

	// Task generates the problems (train split for training, held-out
	// split for evaluation).
	Task task.Config
	// PromptTemplate renders a problem into the prompt text (Go
	// text/template over .Question); short prompts keep tiny models fast.
	PromptTemplate string
	// AnswerTemplate renders the worked answer that SFT warm-up trains on
	// (over .Question and .Answer); it must pass the math verifier.
	AnswerTemplate string

	// SFT warm-up: WarmupSteps optimizer steps of plain SFT on
	// WarmupBatch generated problems each, at WarmupLR. 0 steps skips it.
	WarmupSteps, WarmupBatch int
	WarmupLR                 float64

	// RL: Steps steps of PromptsPerStep prompts × GroupSize samples.
	Steps, PromptsPerStep, GroupSize int
	// Sampling of the RL rollouts.
	Temperature float64
	TopP        float64 // 0: off
	MaxTokens   int     // response tokens at most

	// EvalEvery k steps (warm-up and RL; and after warm-up, and at the
	// last step), the
	// greedy accuracy on EvalProblems distinct held-out problems is
	// logged as eval_accuracy. 0 turns evaluation off.
	EvalEvery, EvalProblems int
	// CheckpointEvery c RL steps (and at the last step) a checkpoint is
	// written to Out/checkpoints/step-N/. 0 writes only the last.
	CheckpointEvery int

	// Resume is a checkpoint directory of an earlier run of this config
	// (Out/checkpoints/step-N): the learner loads it, the data cursor and
	// step continue from it, and metrics.jsonl is appended to.
	Resume string

	// Node is the cluster to place the learner on; nil starts an embedded
	// single-node cluster for the run.
	Node *cluster.Node
	// LearnerResources are what the learner actor holds (default 1 CPU).
	LearnerResources cluster.Resources
	// EngineBatch is the native engine's decode batch (default 256).
	EngineBatch int

	Logger *slog.Logger // default: discard
	// Progress, when set, is called after every step with its metrics.
	Progress func(Metrics)
	// OnWeights, when set, is called after each weight push with the
	// engine now serving version (from the driver's goroutine; the
	// engine must not be closed or given weights by the callee).
	OnWeights func(version int64, eng engine.Engine)
}

// TemplateData is what PromptTemplate and AnswerTemplate see.
type TemplateData struct {
	Question, Answer string
}

// Quickstart is the tuned preset of the quickstart recipe: a 0.45 M
// parameter Qwen2-style model (hidden 128, 2 layers, the built-in 768-token
// vocabulary) trained from scratch on CPU on level-1 arithmetic ("What is
// 27 - 13?" → "\boxed{14}", operands 1..30, 1,365 questions, 30% held
// out): 300 SFT warm-up steps at lr 1e-3, then 800 GRPO steps with
// clip-higher (0.2/0.28), 32 prompts × 8 samples per step at temperature 1,
// lr 1e-4; greedy accuracy on 256 distinct held-out questions every 25
// steps. See the package doc for the measured curves.
func Quickstart(out string) Config {
	l := learner.DefaultConfig()
	l.Algorithm = learner.GRPO
	l.LR = 1e-4
	l.MicroBatchSeqs = 64
	l.MaxResponseLen = 8
	return Config{
		Out:  out,
		Seed: 1,
		Model: &model.Config{Architecture: model.Qwen2, HiddenSize: 128, IntermediateSize: 384, NumLayers: 2,
			NumHeads: 4, NumKVHeads: 2, HeadDim: 32, VocabSize: 768, MaxPositions: 64, RMSNormEps: 1e-6,
			RopeTheta: 10000, TieWordEmbeddings: true, AttentionBias: true, TorchDType: "float32"},
		Learner:        l,
		Task:           task.Config{Seed: 1, Kinds: []string{task.Arithmetic}, Level: 1, HeldOutPercent: 30},
		PromptTemplate: "{{.Question}}\n",
		AnswerTemplate: `\boxed{ {{- .Answer -}} }`,
		WarmupSteps:    300, WarmupBatch: 64, WarmupLR: 1e-3,
		Steps: 800, PromptsPerStep: 32, GroupSize: 8,
		Temperature: 1, MaxTokens: 8,
		EvalEvery: 25, EvalProblems: 256,
		CheckpointEvery: 100,
	}
}

// compiled are a Config's parsed templates.
type compiled struct {
	prompt, answer *template.Template
}

func (c *Config) validate() (*compiled, error) {
	bad := func(field string, v any, want string) error {
		return fmt.Errorf("driver config: %s %v: %s", field, v, want)
	}
	switch {
	case c.Out == "":
		return nil, fmt.Errorf("driver config: out: empty run directory")
	case (c.Model == nil) == (c.ModelDir == ""):
		return nil, fmt.Errorf("driver config: set exactly one of model and model_dir")
	case c.WarmupSteps < 0:
		return nil, bad("warmup_steps", c.WarmupSteps, "want ≥ 0")
	case c.WarmupSteps > 0 && c.WarmupBatch <= 0:
		return nil, bad("warmup_batch", c.WarmupBatch, "want > 0")
	case c.WarmupSteps > 0 && !(c.WarmupLR > 0):
		return nil, bad("warmup_lr", c.WarmupLR, "want > 0")
	case c.Steps < 0:
		return nil, bad("steps", c.Steps, "want ≥ 0")
	case c.PromptsPerStep <= 0:
		return nil, bad("prompts_per_step", c.PromptsPerStep, "want > 0")
	case c.GroupSize <= 0:
		return nil, bad("group_size", c.GroupSize, "want > 0")
	case !(c.Temperature >= 0):
		return nil, bad("temperature", c.Temperature, "want ≥ 0")
	case !(c.TopP >= 0 && c.TopP <= 1):
		return nil, bad("top_p", c.TopP, "want [0, 1]")
	case c.MaxTokens <= 0:
		return nil, bad("max_tokens", c.MaxTokens, "want > 0")
	case c.EvalEvery < 0:
		return nil, bad("eval_every", c.EvalEvery, "want ≥ 0")
	case c.EvalEvery > 0 && c.EvalProblems <= 0:
		return nil, bad("eval_problems", c.EvalProblems, "want > 0")
	case c.CheckpointEvery < 0:
		return nil, bad("checkpoint_every", c.CheckpointEvery, "want ≥ 0")
	case c.EngineBatch < 0:
		return nil, bad("engine_batch", c.EngineBatch, "want ≥ 0 (0: 256)")
	}
	var t compiled
	var err error
	if t.prompt, err = parseTemplate("prompt_template", c.PromptTemplate, "Question"); err != nil {
		return nil, err
	}
	if t.answer, err = parseTemplate("answer_template", c.AnswerTemplate, "Answer"); err != nil {
		return nil, err
	}
	l := c.Learner
	l.Model, l.ModelDir, l.Seed = c.Model, c.ModelDir, c.Seed
	if err := l.Validate(); err != nil {
		return nil, fmt.Errorf("driver config: %w", err)
	}
	return &t, nil
}

func parseTemplate(field, text, needs string) (*template.Template, error) {
	if strings.TrimSpace(text) == "" {
		return nil, fmt.Errorf("driver config: %s: empty", field)
	}
	if !strings.Contains(text, "."+needs) {
		return nil, fmt.Errorf("driver config: %s %q: must use .%s", field, text, needs)
	}
	t, err := template.New(field).Option("missingkey=error").Parse(text)
	if err != nil {
		return nil, fmt.Errorf("driver config: %s: %w", field, err)
	}
	var sb strings.Builder
	if err := t.Execute(&sb, TemplateData{Question: "q", Answer: "a"}); err != nil {
		return nil, fmt.Errorf("driver config: %s: %w", field, err)
	}
	return t, nil
}

func render(t *template.Template, d TemplateData) string {
	var sb strings.Builder
	_ = t.Execute(&sb, d) // checked at validation with the same data type
	return sb.String()
}
