package recipes

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata")

// Each testdata/invalid/NAME.yaml has its expected errors, every one at
// once, in NAME.errors (regenerate with go test ./recipes -update).
func TestInvalidRecipesGolden(t *testing.T) {
	files, err := filepath.Glob("testdata/invalid/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no testdata: %v", err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			_, err := Load(f, nil)
			if err == nil {
				t.Fatal("loaded without error")
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("error is not ErrInvalid: %v", err)
			}
			cwd, _ := os.Getwd()
			got := strings.ReplaceAll(err.Error(), cwd, "$PWD") + "\n"
			golden := strings.TrimSuffix(f, ".yaml") + ".errors"
			if *update {
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run with -update)", err)
			}
			if got != string(want) {
				t.Errorf("errors differ from %s:\n--- got\n%s--- want\n%s", golden, got, want)
			}
		})
	}
}

// base is a small valid recipe the table below breaks one field at a time.
const base = `name: base
models:
  policy:
    init: {}
data:
  task: {}
`

// trajFile is a .jsonl file that exists (what sft.trajectories checks
// before a run reads it).
const trajFile = "builtin/data/mbpp_tiny.jsonl"

func cwd(t *testing.T) string {
	d, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestValidationRules(t *testing.T) {
	cases := []struct {
		sets []string
		want string // substring of the one error
	}{
		{[]string{"algorithm.lr=-1e-4"}, "--set algorithm.lr=-1e-4: algorithm.lr: -0.0001: want a positive learning rate"},
		{[]string{"algorithm.lr=0"}, "algorithm.lr: 0: want a positive learning rate"},
		{[]string{"data.verify_on=cluster"}, "data.verify_on: cluster is for the code verifier (data.verifier: code): checking a math answer takes microseconds"},
		{[]string{"data.verify_on=gpu"}, `data.verify_on: "gpu"`},
		{[]string{"data.verify_workers=100000000"}, "data.verify_workers: 100000000: at most 4096 verifications at once"},
		{[]string{"algorithm.clip_low=1.2"}, "algorithm.clip_low: 1.2: want a value in [0, 1)"},
		{[]string{"algorithm.group_size=1"}, "algorithm.group_size: 1: grpo compares the samples of a group"},
		{[]string{"algorithm.group_size=100000000"}, "algorithm.group_size: 100000000: at most 1024 samples per prompt"},
		{[]string{"algorithm.batch_prompts=1000000000"}, "algorithm.batch_prompts: 1000000000: at most 65536 prompts per step"},
		{[]string{"algorithm.batch_prompts=60000"}, "algorithm.batch_prompts: 60000 prompts × group_size 8 = 480000 samples a step: at most 262144"},
		{[]string{"sft.batch_size=1000000000"}, "sft.batch_size: 1000000000: at most 65536 sequences a step"},
		{[]string{"engines.policy.replicas=100000"}, "engines.policy.replicas: 100000: at most 1024 replicas"},
		{[]string{"eval.held_out=1000000000"}, "eval.held_out: 1000000000: at most 1000000 held-out problems"},
		{[]string{"algorithm.epochs=1000000000"}, "algorithm.epochs: 1000000000: at most 100 passes over a batch"},
		{[]string{"algorithm.epochs=100", "algorithm.mini_batches=64"}, "algorithm.mini_batches: 64 mini-batches × epochs 100 = 6400 optimizer steps a step: at most 4096"},
		{[]string{"algorithm.mini_batches=20", "sft.batch_size=4", "sft.steps=1"}, "sft.batch_size: 4 sequences a warm-up step: algorithm.mini_batches 20 × placement.learner_shards 1 need at least 20"},
		{[]string{"algorithm.mini_batches=40", "sft.batch_size=64", "placement.learner_shards=2", "sft.steps=1"}, "sft.batch_size: 64 sequences a warm-up step: algorithm.mini_batches 40 × placement.learner_shards 2 need at least 80"},
		{[]string{"algorithm.mini_batches=100", "placement.learner_shards=2", "sft.steps=0"}, "algorithm.mini_batches: 100 mini-batches × placement.learner_shards 2: an RL step's 128 sequences (batch_prompts × group_size) cannot give each mini-batch a sequence per shard"},
		{[]string{"eval.samples=1000000000", "eval.temperature=1"}, "eval.samples: 1000000000: at most 1024 answers per held-out problem"},
		{[]string{"eval.samples=1000", "eval.temperature=1", "eval.held_out=10000"}, "eval.samples: 1000 answers × eval.held_out 10000 = 10000000 episodes an evaluation: at most 4194304"},
		{[]string{"placement.learner_shards=100000"}, "placement.learner_shards: 100000: at most 1024 learner ranks"},
		{[]string{"models.policy.lora.rank=100000000"}, "models.policy.lora.rank: 100000000: at most 65536 (an adapter's rank is far below its matrix's dimensions)"},
		{[]string{"models.policy.lora.rank=65"}, "models.policy.lora.rank: 65 exceeds q_proj's smaller dimension 64 (models.policy.init's hidden_size 64, intermediate_size 192, heads 4, kv_heads 4): want at most 64"},
		{[]string{"models.policy.init.kv_heads=1", "models.policy.lora.rank=17"}, "models.policy.lora.rank: 17 exceeds k_proj's smaller dimension 16"},
		{[]string{"algorithm.name=rloo", "algorithm.group_size=1"}, "rloo compares the samples"},
		{[]string{"sync.mode=async", "sync.max_staleness=-2"}, "sync.max_staleness: -2: must not be negative"},
		{[]string{"sync.max_staleness=2"}, "only sync.mode async allows stale trajectories"},
		{[]string{"sync.mode=async", "sync.max_staleness=0"}, "0 with async is sync"},
		{[]string{"engines.policy.kind=vllm"}, "--set engines.policy.kind=vllm: engines.policy.vllm: kind vllm needs this section"},
		{[]string{"engines.policy.kind=vllm", "engines.policy.vllm.model=m"}, "engines.policy.vllm.servers: want at least one server URL"},
		{[]string{"engines.policy.kind=tgi"}, `engines.policy.kind: "tgi": want one of native, vllm`},
		{[]string{"engines.policy.kind=vllm", "engines.policy.vllm={servers: [http://h:8000], model: m, weight_update: nfs}"},
			`engines.policy.vllm.weight_update: "nfs": want one of auto, disk, reload_weights`},
		{[]string{"engines.policy.weight_sync=lora"}, "lora needs the model's lora section"},
		{[]string{"algorithm.name=ppo"}, "algorithm ppo needs the critic"},
		{[]string{"algorithm.dual_clip=1"}, "want 0 (off) or a value above 1"},
		{[]string{"algorithm.temperature=0"}, "0 (greedy) makes every sample of a group the same"},
		{[]string{"algorithm.top_p=0"}, "algorithm.top_p: 0: want a value in (0, 1]"},
		{[]string{"algorithm.aggregation=sum"}, `algorithm.aggregation: "sum"`},
		{[]string{"algorithm.warmup=101"}, "more warm-up steps than schedule.steps 100"},
		{[]string{"algorithm.value_clip=0.3"}, "only algorithm ppo uses it"},
		{[]string{"algorithm.rw_sft.beta=2"}, `algorithm.rw_sft: set, but algorithm.name is "grpo"`},
		{[]string{"algorithm.mlmt.stop_gradient=true"}, `algorithm.mlmt: set, but episode.type is "single"`},
		{[]string{"algorithm.mlmt.update_ratio=1:15"}, `algorithm.mlmt.update_ratio: "1:15": alternates the feedback policy's and the solver's updates: needs episode.type mlmt`},
		{[]string{"algorithm.mlmt.update_ratio=15"}, `algorithm.mlmt.update_ratio: "15": want HIGH:LOW`},
		{[]string{"algorithm.mlmt.shared_weights=true"}, "algorithm.mlmt.shared_weights: true: one model in the solver's and the feedback policy's roles: needs episode.type mlmt"},
		{[]string{"algorithm.textual_ac={}"}, `algorithm.textual_ac: set, but episode.type is "single"`},
		{[]string{"algorithm.score.stage1_steps=5"}, `algorithm.score.stage1_steps: 5, but episode.type is "single"`},
		{[]string{"episode.type=score", "algorithm.score.stage1_steps=5"}, "algorithm.score.stage1_steps: 5, but algorithm.kl_coef is 0"},
		{[]string{"episode.type=mlmt", "algorithm.kl_coef=0.01", "algorithm.score.stage1_steps=5"}, `algorithm.score.stage1_steps: 5, but episode.type is "mlmt" (SCoRe's stage I is for score, and for RL-guided SCoRe`},
		{[]string{"episode.type=mlmt", "algorithm.kl_coef=0.01", "algorithm.mlmt.refine_reward=shaped", "algorithm.mlmt.stop_gradient=true", "algorithm.score.stage1_steps=5"}, "stage I trains both solver attempts of a model of its own"},
		{[]string{"episode.type=score", "algorithm.kl_coef=0.01", "algorithm.score.stage1_steps=5", "algorithm.score.stage1_kl_coef=0"}, "algorithm.score.stage1_kl_coef: 0: want a finite value > 0"},
		{[]string{"episode.type=mlmt", "algorithm.mlmt.static_feedback=true", "algorithm.mlmt.train=[solver, feedback]"}, "trains feedback, but algorithm.mlmt.static_feedback is true"},
		{[]string{"episode.type=mlmt", "algorithm.mlmt.train=[solver]", "algorithm.mlmt.stop_gradient=true"}, "add feedback to algorithm.mlmt.train"},
		{[]string{"episode.type=mlmt", "algorithm.mlmt.train=[]"}, "algorithm.mlmt.train: empty"},
		{[]string{"episode.type=mlmt", "algorithm.mlmt.static_feedback=true", "models.feedback.init={}"}, "models.feedback: set, but algorithm.mlmt.static_feedback is true"},
		{[]string{"models.feedback.init={}"}, "a feedback policy needs episode.type mlmt"},
		{[]string{"sft.response={{.Solution}}"}, "sft.response"},
		{[]string{"sft.response=x"}, `sft.response: "x" does not use .Answer`},
		{[]string{"sft.weighting=exp"}, "sft.weighting: set, but neither sft.trajectories nor data.traces is"},
		{[]string{"sft.steps=2", "data.traces.store=" + t.TempDir(), "sft.weighting=best"}, `sft.weighting: "best": want one of none, exp, filter`},
		{[]string{"sft.steps=2", "data.traces.store=" + t.TempDir(), "sft.threshold=3"}, "sft.threshold: set, but sft.weighting is none"},
		{[]string{"data.traces.store=" + t.TempDir()}, "data.traces: feeds the SFT warm-up: set sft.steps > 0 (or data.traces.train rl)"},
		{[]string{"sft.steps=2", "data.traces.store=" + t.TempDir(), "data.traces.train=offline"}, `data.traces.train: "offline": want one of warmup, rl`},
		{[]string{"data.traces.store=" + t.TempDir(), "data.traces.train=rl", "algorithm.name=reinforce_pp"}, "data.traces.train: rl: offline RL on trace groups takes a group estimator (grpo, drgrpo, rloo), not algorithm.name reinforce_pp"},
		{[]string{"data.traces.store=" + t.TempDir(), "data.traces.train=rl", "data.traces.min_reward=1"}, "data.traces.min_reward: set with data.traces.train rl"},
		{[]string{"data.traces.store=" + t.TempDir(), "data.traces.train=rl", "algorithm.tis_cap=2"}, "algorithm.tis_cap: 2 with data.traces.train rl"},
		{[]string{"trace.sample=1.5"}, "trace.sample: 1.5: want a share of episodes in [0, 1]"},
		{[]string{"sft.steps=2", "sft.trajectories=eps.csv"}, "sft.trajectories: " + cwd(t) + "/eps.csv: want a .jsonl file of episodes or an .arrow trajectory file"},
		{[]string{"sft.steps=2", "sft.trajectories=/nonexistent/eps.jsonl"}, "sft.trajectories: stat /nonexistent/eps.jsonl: no such file"},
		{[]string{"sft.trajectories=" + trajFile}, "sft.trajectories: set, but sft.steps is 0"},
		{[]string{"sft.steps=2", "sft.trajectories=" + trajFile, "sft.weighting=best"}, `sft.weighting: "best": want one of none, exp, filter`},
		{[]string{"sft.steps=2", "sft.trajectories=" + trajFile, "sft.weighting=filter", "sft.beta=2"}, "sft.beta: set, but sft.weighting is filter"},
		{[]string{"sft.steps=2", "sft.trajectories=" + trajFile, "sft.weighting=exp", "sft.beta=-1"}, "sft.beta: -1: want a positive temperature"},
		{[]string{"sft.steps=2", "sft.trajectories=" + trajFile, "sft.threshold=3"}, "sft.threshold: set, but sft.weighting is none"},
		{[]string{"sft.lora=true"}, "sft.lora: true, but models.policy.lora is absent"},
		{[]string{"sft.steps=2", "sft.collect={teacher: 4}"}, `sft.collect: set, but episode.type is "single" (it plays agent episodes)`},
		{[]string{"sft.steps=2", "sft.base_steps=1"}, "sft.base_steps: set, but sft.lora is false"},
		{[]string{"sft.steps=2", "sft.trajectories=" + trajFile, "data.traces.store=builtin"}, "sft.trajectories: set with data.traces: one source feeds the warm-up"},
		{[]string{"models.policy.lora.preset=qk"}, `models.policy.lora.preset: "qk": want one of qv`},
		{[]string{"episode.tools=[calculator]"}, "tools need episode.type tools"},
		{[]string{"episode.type=tools", "episode.tools=[shell]"}, `episode.tools.0: "shell": want one of calculator, python`},
		{[]string{"eval.metrics=[turn1_accuracy]"}, `needs episode.type mlmt or score`},
		{[]string{"eval.samples=4"}, "samples at temperature 0 are all the same"},
		{[]string{"eval.samples=4", "eval.temperature=0"}, "eval.samples: 4 samples at temperature 0 are all the same (eval.temperature 0 is greedy); set eval.temperature > 0"},
		{[]string{"eval.group_by=[subject]"}, "eval.group_by: needs data.dataset"},
		{[]string{"eval.group_by=[]"}, "eval.group_by: empty"},
		{[]string{"data.task=null", "data.dataset.train=" + trajFile, "eval.group_by=[level, level]"}, `eval.group_by.1: "level": listed twice`},
		{[]string{"eval.group_by=[a, b, c, d, e, f, g, h, i]"}, "eval.group_by: 9 columns: want at most 8"},
		{[]string{"data.task=null", "data.dataset.train=" + trajFile, "data.dataset.eval_columns.prompt=problem"}, "data.dataset.eval_columns: needs data.dataset.eval"},
		{[]string{"eval.pass_k=[1]"}, "eval.pass_k: pass@k needs sampled answers: eval.temperature is 0"},
		{[]string{"eval.samples=4", "eval.temperature=1", "eval.pass_k=[]"}, "eval.pass_k: empty"},
		{[]string{"eval.samples=4", "eval.temperature=1", "eval.pass_k=[1, 8]"}, "eval.pass_k.1: 8: want 1..eval.samples (4)"},
		{[]string{"eval.samples=4", "eval.temperature=1", "eval.pass_k=[0]"}, "eval.pass_k.0: 0: want 1..eval.samples (4)"},
		{[]string{"eval.samples=4", "eval.temperature=1", "eval.pass_k=[2, 2]"}, "eval.pass_k.1: 2: want ascending values"},
		{[]string{"eval.temperature=-0.5"}, "eval.temperature: -0.5: must not be negative"},
		{[]string{"deterministic=true", "sync.mode=async"}, "deterministic: needs sync.mode sync"},
		{[]string{"models.policy.lora.rank=0"}, "models.policy.lora.rank: 0: want a positive integer"},
		{[]string{"models.policy.lora.targets=[qkv]"}, `models.policy.lora.targets.0: "qkv"`},
		{[]string{"models.policy.init.vocab_size=100"}, "the built-in tokenizer needs at least"},
		// How to drop the recipe's init when --set gives a path.
		{[]string{"models.policy.path=/nonexistent"}, "models.policy: both path and init are set; want one (to load path, drop init: --set models.policy.init=null)"},
		{[]string{"models.reference.init={}"}, "algorithm.kl_coef is 0: the reference model would be loaded and never used"},
		{[]string{"data.task.held_out_percent=100"}, "data.task.held_out_percent: 100: want 1..99"},
		{[]string{"data.verifier=code"}, "the built-in task has math answers"},
		{[]string{"placement.mode=spread"}, `placement.mode: "spread": want one of colocated, split`},
		{[]string{"placement.learner.gpus=1.5"}, "above 1, want whole GPUs"},
		{[]string{"placement.rollout.custom.tpu=-1"}, "placement.rollout.custom.tpu: -1: must not be negative"},
		{[]string{"placement.rollout.memory=lots"}, `placement.rollout.memory: size "lots": want a number of bytes`},
		{[]string{"placement.learner.memory=8GB/2"}, `placement.learner.memory: size "8GB/2": unknown unit "GB/2"`},
		{[]string{"placement.learner.custom.memory=1e9"}, "placement.learner.custom.memory: the node's memory is placement.learner.memory (a size: 16GiB), not a custom resource"},
		{[]string{"placement.learner_shards=0"}, "placement.learner_shards: 0: want a positive integer"},
		{[]string{"schedule.steps=0"}, "schedule.steps: 0: want a positive integer"},
		// The warm-up is not also blamed for a bad step count.
		{[]string{"algorithm.warmup=5", "schedule.steps=-1"}, "schedule.steps: -1: want a positive integer"},
		{[]string{"checkpoint.keep=-1"}, "checkpoint.keep: -1: must not be negative"},
		// A model too large to build is refused here; it used to pass, and
		// the run then exhausted the host's memory building it (layers)
		// or died with "fatal error: out of memory" (hidden_size).
		{[]string{"models.policy.init.layers=2000000"}, "--set models.policy.init.layers=2000000: models.policy.init.layers: 2000000: the model would have 1.07e+11 parameters (vocab_size 512, hidden_size 64, intermediate_size 192, layers 2000000); a randomly initialized model has at most 1e+10"},
		{[]string{"models.policy.init.hidden_size=2000000000"}, "--set models.policy.init.hidden_size=2000000000: models.policy.init.hidden_size: 2000000000: the model would have 3.2e+19 parameters"},
		{[]string{"models.policy.init.vocab_size=20000000000", "models.policy.init.tie_word_embeddings=false"}, "models.policy.init.vocab_size: 20000000000: the model would have 2.56e+12 parameters"},
	}
	for _, c := range cases {
		t.Run(strings.Join(c.sets, " "), func(t *testing.T) {
			_, err := Parse("base.yaml", []byte(base), t.TempDir(), c.sets)
			if err == nil {
				t.Fatalf("no error; want %q", c.want)
			}
			var es Errors
			if !errors.As(err, &es) || len(es) != 1 {
				t.Fatalf("want exactly one error containing %q, got:\n%v", c.want, err)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("got %q\nwant it to contain %q", err, c.want)
			}
		})
	}
	if _, err := Parse("base.yaml", []byte(base), "", nil); err != nil {
		t.Fatalf("the base recipe is invalid: %v", err)
	}
}

func TestSetOverrides(t *testing.T) {
	l, err := Parse("base.yaml", []byte(base), "", []string{
		"algorithm.lr=3e-4",              // typed by the schema: a float
		"algorithm.group_size=4",         // an int
		"checkpoint.optimizer=false",     // a bool
		"name=12",                        // a string, though it looks like a number
		"data.task.kinds=[word, linear]", // a list
		"data.task.kinds.1=fraction",     // one element
		"models.policy.lora.rank=4",      // creates the section, with its defaults
		"placement.rollout.custom.tpu=2",
		"sync.mode=async",
	})
	if err != nil {
		t.Fatal(err)
	}
	if l.Algorithm.LR != 3e-4 || l.Algorithm.GroupSize != 4 || l.Checkpoint.Optimizer || l.Name != "12" {
		t.Errorf("scalars: lr %v, group %d, optimizer %v, name %q", l.Algorithm.LR, l.Algorithm.GroupSize, l.Checkpoint.Optimizer, l.Name)
	}
	if !reflect.DeepEqual(l.Data.Task.Kinds, []string{"word", "fraction"}) {
		t.Errorf("kinds = %v", l.Data.Task.Kinds)
	}
	if lo := l.Models.Policy.LoRA; lo == nil || lo.Rank != 4 || lo.Alpha != 16 || len(lo.Targets) != 7 {
		t.Errorf("lora = %+v", lo)
	}
	if l.Engines.Policy.WeightSync != "lora" {
		t.Errorf("weight_sync = %q; with LoRA the default is lora", l.Engines.Policy.WeightSync)
	}
	if l.Placement.Rollout.Custom["tpu"] != 2 {
		t.Errorf("custom = %v", l.Placement.Rollout.Custom)
	}
	if l.Sync.MaxStaleness != 1 {
		t.Errorf("async max_staleness = %d, want the default 1", l.Sync.MaxStaleness)
	}
	if p, ok := l.Pos("algorithm.lr"); !ok || p.Set != "algorithm.lr=3e-4" {
		t.Errorf("Pos(algorithm.lr) = %+v, %v", p, ok)
	}
	if p, ok := l.Pos("models.policy.init"); !ok || p.Line != 4 {
		t.Errorf("Pos(models.policy.init) = %+v, %v", p, ok)
	}

	// Bad overrides: each error names its override, all reported at once.
	_, err = Parse("base.yaml", []byte(strings.Replace(base, "task: {}", "task: {kinds: [word, linear]}", 1)), "", []string{
		"algorithm.lr=fast", "algorithm.lrr=1", "noequals", "data.task.kinds.9=x", "name.first=x", "algorithm..lr=1", "algorithm.group_size=2.5",
	})
	want := []string{
		`--set algorithm.lr=fast: algorithm.lr: want a number, got "fast"`,
		`--set algorithm.lrr=1: algorithm.lrr: unknown key "lrr" (did you mean "lr"?)`,
		`--set noequals: want KEY.PATH=VALUE`,
		`--set name.first=x: name is a value ("base"), not a section`,
		`--set data.task.kinds.9=x: data.task.kinds is a list of 2; want an index 0..2, got "9"`,
		`--set algorithm..lr=1: empty key in "algorithm..lr"`,
		`--set algorithm.group_size=2.5: algorithm.group_size: want an integer, got "2.5"`,
	}
	if err == nil {
		t.Fatal("bad overrides accepted")
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("errors lack %q:\n%v", w, err)
		}
	}
}

// --set KEY=null removes a key the recipe has, so a variant of a built-in
// can drop a setting its new episode type refuses (mlmt_math as a
// single-turn run); on a shared anchor only the path named loses it, and a
// null for a key the recipe lacks is named, not silently ignored.
func TestSetNullRemovesKey(t *testing.T) {
	t.Setenv("RLNODE_HOME", t.TempDir())
	single := []string{"episode.type=single", "models.feedback=null", "engines.feedback=null",
		"sft.feedback_response=null", "sft.refine_feedback=null", "algorithm.mlmt=null"}
	l, err := Load("mlmt_math", single)
	if err != nil {
		t.Fatalf("mlmt_math as single-turn: %v", err)
	}
	if l.Episode.Type != "single" || l.SFT.FeedbackResponse != "" || l.SFT.RefineFeedback != "" || l.Models.Feedback != nil || l.SFT.Steps != 300 {
		t.Errorf("episode %q, feedback_response %q, refine_feedback %q, feedback model %v, sft.steps %d",
			l.Episode.Type, l.SFT.FeedbackResponse, l.SFT.RefineFeedback, l.Models.Feedback, l.SFT.Steps)
	}
	if _, ok := l.Pos("sft.feedback_response"); ok {
		t.Error("sft.feedback_response still has a position after --set null removed it")
	}
	// Without the removals the same variant is refused, naming the keys.
	if _, err := Load("mlmt_math", single[:3]); err == nil || !strings.Contains(err.Error(), `sft.feedback_response: set, but episode.type is "single"`) {
		t.Errorf("mlmt_math with episode.type=single and its mlmt keys kept: %v", err)
	}
	// A removed value takes its default.
	l, err = Parse("base.yaml", []byte(base), "", []string{"algorithm.lr=3e-4", "algorithm.lr=null"})
	if err != nil {
		t.Fatal(err)
	}
	if def, _ := Parse("base.yaml", []byte(base), "", nil); l.Algorithm.LR != def.Algorithm.LR {
		t.Errorf("algorithm.lr after removal %v, want the default %v", l.Algorithm.LR, def.Algorithm.LR)
	}
	src := "models:\n  policy:\n    init: &tiny {hidden_size: 32, heads: 2, layers: 3}\n  feedback:\n    init: *tiny\nepisode: {type: mlmt}\ndata: {task: {}}\n"
	l, err = Parse("shared.yaml", []byte(src), "", []string{"models.feedback.init.layers=null"})
	if err != nil {
		t.Fatal(err)
	}
	if l.Models.Policy.Init.Layers != 3 || l.Models.Feedback.Init.Layers == 3 {
		t.Errorf("layers after removing the feedback's: policy %d, feedback %d; want 3 and the default", l.Models.Policy.Init.Layers, l.Models.Feedback.Init.Layers)
	}
	for set, want := range map[string]string{
		"algorithm.lrr=null":      `--set algorithm.lrr=null: algorithm.lrr: unknown key "lrr" (did you mean "lr"?)`,
		"sft.feedback_response=~": "--set sft.feedback_response=~: sft.feedback_response: null removes a key, and the recipe does not set sft.feedback_response (nothing to remove)",
	} {
		if _, err := Parse("base.yaml", []byte(base), "", []string{set}); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("--set %s: %v, want %q", set, err, want)
		}
	}
}

// --set LIST.N=null names the list: null removes a key, and the element
// the recipe does set was refused as one "the recipe does not set".
func TestSetNullOnAListElement(t *testing.T) {
	src := strings.Replace(base, "  task: {}", "  task: {kinds: [word, linear]}", 1)
	for _, set := range []string{"data.task.kinds.0=null", "data.task.kinds.2=~"} {
		_, err := Parse("base.yaml", []byte(src), "", []string{set})
		idx := set[len("data.task.kinds."):strings.Index(set, "=")]
		want := "--set " + set + ": data.task.kinds." + idx + ": null removes a key, not a list element: give the whole list instead (--set data.task.kinds=[...])"
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("--set %s: %v, want %q", set, err, want)
		}
	}
}

// --set KEY=null on a key a section takes through a merge key (<<) says
// so: the recipe does set it, and null cannot remove it there.
func TestSetNullOnAMergedKey(t *testing.T) {
	src := "models:\n  policy:\n    init: &tiny {hidden_size: 32, heads: 2, layers: 3}\n  feedback:\n    init: {<<: *tiny, layers: 2}\nepisode: {type: mlmt}\ndata: {task: {}}\n"
	_, err := Parse("merged.yaml", []byte(src), "", []string{"models.feedback.init.hidden_size=null"})
	want := "--set models.feedback.init.hidden_size=null: models.feedback.init.hidden_size: null removes a key the recipe writes here, and hidden_size comes from a merge key (<<): give it a value instead"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("%v, want %q", err, want)
	}
	// A key the section writes itself is still removed.
	l, err := Parse("merged.yaml", []byte(src), "", []string{"models.feedback.init.layers=null"})
	if err != nil || l.Models.Feedback.Init.Layers != 3 {
		t.Errorf("layers=null: %v, feedback layers %v; want the merged 3", err, l)
	}
}

// The resolved recipe keeps explicit zeros whose default is not zero.
func TestResolvedKeepsZeros(t *testing.T) {
	l, err := Parse("base.yaml", []byte(base), "", []string{"algorithm.grad_clip=0", "checkpoint.optimizer=false", "eval.held_out=7"})
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	if err := l.WriteResolved(&b); err != nil {
		t.Fatal(err)
	}
	back, err := Parse("resolved.yaml", []byte(b.String()), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	if back.Algorithm.GradClip != 0 || back.Checkpoint.Optimizer || back.Eval.HeldOut != 7 {
		t.Errorf("resolved lost values: grad_clip %v optimizer %v held_out %d\n%s", back.Algorithm.GradClip, back.Checkpoint.Optimizer, back.Eval.HeldOut, b.String())
	}
	if !strings.HasPrefix(b.String(), "# resolved recipe: base.yaml --set algorithm.grad_clip=0") {
		t.Errorf("header: %q", strings.SplitN(b.String(), "\n", 2)[0])
	}
}

// A file name or a --set value with a line break (YAML's NEL and line
// separators included) stays inside the resolved recipe's header comment:
// the file loads back to the same recipe.
func TestResolvedHeaderLineBreaks(t *testing.T) {
	for _, brk := range []string{"\n", "\r", "\u0085", "\u2028", "\u2029"} {
		desc := "one" + brk + "  two"
		l, err := Parse("odd"+brk+"seed: 5"+brk+".yaml", []byte(base), "", []string{"description=" + desc})
		if err != nil {
			t.Fatalf("break %q: %v", brk, err)
		}
		var b strings.Builder
		if err := l.WriteResolved(&b); err != nil {
			t.Fatal(err)
		}
		back, err := Parse("resolved.yaml", []byte(b.String()), "", nil)
		if err != nil {
			t.Errorf("break %q: the resolved recipe does not load back: %v\n%s", brk, err, b.String())
			continue
		}
		if back.Description != l.Description || back.Seed != l.Seed {
			t.Errorf("break %q: loaded back description %q seed %d, want %q %d", brk, back.Description, back.Seed, l.Description, l.Seed)
		}
	}
}

func TestRelativePaths(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "train.jsonl"), []byte(`{"prompt":"1+1","answer":"2"}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	src := "models: {policy: {init: {}}}\ndata: {dataset: {train: train.jsonl}}\n"
	if err := os.WriteFile(filepath.Join(dir, "r.yaml"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	l, err := Load(filepath.Join(dir, "r.yaml"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if l.Data.Dataset.Train != filepath.Join(dir, "train.jsonl") {
		t.Errorf("train = %q: relative to the recipe's directory", l.Data.Dataset.Train)
	}
	if l.Name != "r" {
		t.Errorf("name = %q, want the file's base name", l.Name)
	}
	// From --set, relative to the working directory: here it does not exist.
	_, err = Load(filepath.Join(dir, "r.yaml"), []string{"data.dataset.train=elsewhere.jsonl"})
	cwd, _ := os.Getwd()
	if err == nil || !strings.Contains(err.Error(), filepath.Join(cwd, "elsewhere.jsonl")) {
		t.Errorf("want an error naming %s, got %v", filepath.Join(cwd, "elsewhere.jsonl"), err)
	}
	if _, err := Load("no_such_recipe", nil); err == nil || !strings.Contains(err.Error(), "built-in: agent_equations, agent_game, agent_rwsft, agent_tools, archer, archer_code, archer_multiturn, archer_multiturn_code, bi_level_score, bi_level_score_code, bi_level_score_stopgrad, grpo_gsm8k, mbpp") {
		t.Errorf("unknown name: %v", err)
	}
}

// Anchors, aliases and merge keys let a recipe share sections.
func TestAnchorsAndMergeKeys(t *testing.T) {
	src := `name: shared
models:
  policy:
    init: &tiny {hidden_size: 32, heads: 2, layers: 1}
  feedback:
    init:
      <<: *tiny
      layers: 3
  reference:
    init: *tiny
episode: {type: mlmt}
algorithm: {kl_coef: 0.01}
data: {task: {}}
`
	l, err := Parse("shared.yaml", []byte(src), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	p, f, r := l.Models.Policy.Init, l.Models.Feedback.Init, l.Models.Reference.Init
	if p.HiddenSize != 32 || p.Layers != 1 || f.HiddenSize != 32 || f.Heads != 2 || f.Layers != 3 || r.Layers != 1 || r.HiddenSize != 32 {
		t.Errorf("policy %+v\nfeedback %+v\nreference %+v", p, f, r)
	}
	_, err = Parse("bad.yaml", []byte("models:\n  policy:\n    <<: 3\n"), "", nil)
	if err == nil || !strings.Contains(err.Error(), `bad.yaml:3: models.policy: << merges a section, got "3"`) {
		t.Errorf("bad merge: %v", err)
	}
}

// Merge keys expand each anchored section once: a chain of anchors that
// each merge the one before ten times (a 2 KB "billion laughs") loads at
// once, and a section that merges itself is an error, not a stack
// overflow. Before, the first hung and the second crashed the process.
func TestMergeKeysBounded(t *testing.T) {
	var b strings.Builder
	b.WriteString("x: &a0 {layers: 1, heads: 2, hidden_size: 32}\n")
	for i := 1; i < 40; i++ {
		fmt.Fprintf(&b, "x%d: &a%d {<<: [%s]}\n", i, i, strings.TrimSuffix(strings.Repeat(fmt.Sprintf("*a%d, ", i-1), 10), ", "))
	}
	b.WriteString("models:\n  policy:\n    init:\n      <<: [*a39, *a39]\n      heads: 4\n")
	_, err := Parse("bomb.yaml", []byte(b.String()), "", nil)
	if err == nil || !strings.Contains(err.Error(), `bomb.yaml:1: x: unknown key "x"`) || strings.Contains(err.Error(), "models.") {
		t.Errorf("merge chain: %v", err)
	}
	for _, src := range []string{
		"models:\n  policy: &p\n    <<: *p\n",
		"models:\n  policy: &a\n    init: &b {<<: *a}\n    <<: *b\n",
	} {
		_, err := Parse("cycle.yaml", []byte(src), "", nil)
		if err == nil || !strings.Contains(err.Error(), "<< merges a section into itself") {
			t.Errorf("%q: %v", src, err)
		}
	}
}

// A recipe that makes thousands of problems (one section of unknown keys
// merged into many) reports MaxErrors of them and counts the rest: before,
// a 700 KB file of this kind made 2.3 million errors (318 MB of text).
func TestErrorsBounded(t *testing.T) {
	var b strings.Builder
	b.WriteString("x: &u {")
	for i := range 1000 {
		fmt.Fprintf(&b, "k%d: 1, ", i)
	}
	b.WriteString("}\nschedule: {<<: *u}\neval: {<<: *u}\ncheckpoint: {<<: *u}\nsync: {<<: *u}\ntrace: {<<: *u}\n")
	_, err := Parse("many.yaml", []byte(b.String()), "", nil)
	var es Errors
	if !errors.As(err, &es) {
		t.Fatalf("want Errors, got %v", err)
	}
	// The checks after decoding (data, models.policy missing) add theirs.
	if len(es) < MaxErrors || len(es) > MaxErrors+5 {
		t.Fatalf("%d errors, want %d, the checks' and a count of the rest", len(es), MaxErrors)
	}
	if got, want := es[len(es)-1].Error(), "many.yaml: and 4801 more problems not shown"; got != want {
		t.Errorf("last error %q, want %q", got, want)
	}
	if n := es.Count(); n != len(es)-1+4801 {
		t.Errorf("Count() %d, want %d", n, len(es)-1+4801)
	}
}

// An override of a shared section changes the path it names only.
func TestSetOnSharedSection(t *testing.T) {
	src := `models:
  policy:
    init: &tiny {hidden_size: 32, heads: 2, layers: 1}
  feedback:
    init: *tiny
engines:
  policy: &e {kind: vllm, vllm: {servers: ["http://a:1"], model: m}}
  feedback: *e
episode: {type: mlmt}
data: {task: {}}
`
	for _, c := range []struct {
		set                   string
		policyLayers, fbLayer int
	}{
		{"models.feedback.init.layers=3", 1, 3}, // through the alias
		{"models.policy.init.layers=4", 4, 1},   // through the anchor
	} {
		l, err := Parse("shared.yaml", []byte(src), "", []string{c.set, "engines.policy.vllm.model=p"})
		if err != nil {
			t.Fatal(err)
		}
		if l.Engines.Policy.VLLM.Model != "p" || l.Engines.Feedback.VLLM.Model != "m" {
			t.Errorf("vllm models: policy %q feedback %q, want p, m", l.Engines.Policy.VLLM.Model, l.Engines.Feedback.VLLM.Model)
		}
		if l.Models.Policy.Init.Layers != c.policyLayers || l.Models.Feedback.Init.Layers != c.fbLayer {
			t.Errorf("--set %s: policy layers %d, feedback layers %d; want %d, %d", c.set,
				l.Models.Policy.Init.Layers, l.Models.Feedback.Init.Layers, c.policyLayers, c.fbLayer)
		}
	}
}

func TestSaveResolved(t *testing.T) {
	l, err := Parse("base.yaml", []byte(base), "", []string{"seed=9"})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	path, err := l.SaveResolved(dir)
	if err != nil || path != filepath.Join(dir, ResolvedFile) {
		t.Fatalf("SaveResolved = %q, %v", path, err)
	}
	back, err := Load(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if back.Seed != 9 || back.Name != "base" {
		t.Errorf("loaded back seed %d name %q", back.Seed, back.Name)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("run directory holds %d files, want only %s", len(entries), ResolvedFile)
	}
	if _, err := l.SaveResolved(filepath.Join(dir, "missing", "sub")); err == nil {
		t.Error("SaveResolved into a missing directory succeeded")
	}
}

func TestFeedbackMetrics(t *testing.T) {
	t.Setenv("RLNODE_HOME", t.TempDir())
	l, err := Load("mlmt_math", nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(l.Eval.Metrics, "turn3_accuracy_static") || !slices.Contains(l.Eval.Metrics, "turn1_accuracy") {
		t.Errorf("mlmt_math metrics = %v", l.Eval.Metrics)
	}
	st, err := Load("mlmt_math_static", nil)
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(st.Eval.Metrics, "turn3_accuracy_static") {
		t.Errorf("static feedback run has turn3_accuracy_static: %v", st.Eval.Metrics)
	}
	_, err = Load("mlmt_math_static", []string{"eval.metrics=[turn3_accuracy_static]"})
	if err == nil || !strings.Contains(err.Error(), "needs episode.type mlmt with a feedback policy") {
		t.Errorf("turn3_accuracy_static with static feedback: %v", err)
	}
}

func TestRecipeFileLimits(t *testing.T) {
	dir := t.TempDir()
	big := filepath.Join(dir, "train.jsonl")
	if err := os.WriteFile(big, []byte(strings.Repeat(`{"prompt": "1+1", "answer": "2"}`+"\n", 40000)), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(big, nil); err == nil || !strings.Contains(err.Error(), "not a recipe") {
		t.Errorf("a 1.3 MB dataset as recipe: %v", err)
	}
	if _, err := Load(dir, nil); err == nil || !strings.Contains(err.Error(), "is a directory") {
		t.Errorf("a directory as recipe: %v", err)
	}
}

// A data file that is not a regular file is refused: a pipe named
// train.jsonl hung recipe validate and run waiting for a writer, and a
// link to a device (/dev/zero) was read without end.
func TestDataFileNotRegular(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"train.jsonl", "eps.jsonl"} {
		if err := os.Symlink(os.DevNull, filepath.Join(dir, name)); err != nil {
			t.Skip(err)
		}
	}
	_, err := Parse("base.yaml", []byte(base), dir, []string{"data.task=null", "data.dataset.train=" + filepath.Join(dir, "train.jsonl")})
	if err == nil || !strings.Contains(err.Error(), "data.dataset.train: "+filepath.Join(dir, "train.jsonl")+" is a device, not a regular file; want a .jsonl") {
		t.Errorf("a device as dataset: %v", err)
	}
	_, err = Parse("base.yaml", []byte(base), dir, []string{"sft.steps=2", "sft.trajectories=" + filepath.Join(dir, "eps.jsonl")})
	if err == nil || !strings.Contains(err.Error(), "sft.trajectories: "+filepath.Join(dir, "eps.jsonl")+" is a device, not a regular file") {
		t.Errorf("a device as trajectories: %v", err)
	}
}

// The qv preset fills what the recipe leaves out.
func TestLoRAPreset(t *testing.T) {
	for _, c := range []struct {
		sets    []string
		dropout float64
		targets string
	}{
		{[]string{"models.policy.lora.preset=qv"}, 0.1, "[q_proj v_proj]"},
		{[]string{"models.policy.lora={preset: qv, dropout: 0}"}, 0, "[q_proj v_proj]"},
		{[]string{"models.policy.lora={preset: qv, targets: [o_proj]}", "models.policy.lora.rank=4"}, 0.1, "[o_proj]"},
		{[]string{"models.policy.lora.rank=4"}, 0, "[q_proj k_proj v_proj o_proj gate_proj up_proj down_proj]"},
	} {
		l, err := Parse("base.yaml", []byte(base), "", c.sets)
		if err != nil {
			t.Fatal(err)
		}
		lo := l.Recipe.Models.Policy.LoRA
		if lo.Dropout != c.dropout || fmt.Sprint(lo.Targets) != c.targets || lo.Alpha != 16 {
			t.Errorf("%v: %+v", c.sets, lo)
		}
	}
}

// A recipe path that is a pipe is refused without opening it: Load (and
// the remote submit that reads a recipe file) blocked until something
// wrote into it.
func TestRecipeFileThatIsAPipe(t *testing.T) {
	p := filepath.Join(t.TempDir(), "r.yaml")
	if err := syscall.Mkfifo(p, 0o644); err != nil {
		t.Skip("mkfifo:", err)
	}
	done := make(chan error, 1)
	go func() { _, err := Load(p, nil); done <- err }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), p+" is not a regular file") {
			t.Errorf("a pipe as the recipe: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("Load blocked on a pipe")
	}
}
