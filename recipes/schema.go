package recipes

// Recipe is one training run, as a recipe file describes it. The YAML keys
// are the `yaml` tags; recipes/SCHEMA.md documents every key with its default
// and its limits. Default returns a Recipe with every default filled in; a
// recipe file is decoded on top of it (Parse), so a key left out keeps its
// default, and Resolve fills the defaults that depend on other fields.
type Recipe struct {
	// Name names the run (logs, job names). Default: the file's base name.
	Name string `yaml:"name"`
	// Description is free text for `rlnode recipe list`.
	Description string `yaml:"description"`
	// Seed seeds everything random in the run: initialization, data order,
	// sampling, dropout. Default 1.
	Seed uint64 `yaml:"seed"`
	// Deterministic asks for bit-reproducible CPU runs: same seed, same
	// weights, also across a --resume. Needs the native engine and sync
	// mode. Default false.
	Deterministic bool `yaml:"deterministic"`

	Models     Models     `yaml:"models"`
	Engines    Engines    `yaml:"engines"`
	Data       Data       `yaml:"data"`
	Episode    Episode    `yaml:"episode"`
	Algorithm  Algorithm  `yaml:"algorithm"`
	SFT        SFT        `yaml:"sft"`
	Placement  Placement  `yaml:"placement"`
	Schedule   Schedule   `yaml:"schedule"`
	Eval       Eval       `yaml:"eval"`
	Checkpoint Checkpoint `yaml:"checkpoint"`
	Sync       Sync       `yaml:"sync"`
	// Trace says whether rlnode run records its episodes as traces
	// (docs/traces.md); its --traces and --trace-sample flags override it.
	// Default: recorded, every episode.
	Trace *Trace `yaml:"trace,omitempty"`
}

// Trace is the run's recording of its episodes in DIR/traces.
type Trace struct {
	// Enabled records the episodes. Default true.
	Enabled *bool `yaml:"enabled,omitempty"`
	// Sample is the share of episodes recorded, in [0, 1], picked by a
	// hash of the run and episode ids. Default 1.
	Sample *float64 `yaml:"sample,omitempty"`
}

// Models are the networks of a run.
type Models struct {
	// Policy is the trained policy (the solver of MLMT and SCoRe). Required.
	Policy Model `yaml:"policy"`
	// Feedback is MLMT's feedback policy (the higher level). Absent: a
	// separate copy of the policy's initial weights. Must be absent with
	// static feedback and for episodes other than mlmt.
	Feedback *Model `yaml:"feedback,omitempty"`
	// Reference is the frozen model of the KL term. Absent: a frozen copy
	// of the policy's initial weights. Only used when algorithm.kl_coef > 0.
	Reference *Model `yaml:"reference,omitempty"`
}

// Model is one network: a checkpoint directory or a random initialization.
type Model struct {
	// Path is a checkpoint directory in Hugging Face's layout (config.json,
	// *.safetensors, tokenizer.json). Relative paths are relative to the
	// recipe file's directory; a hub id (ORG/NAME[@REVISION]) that is no
	// such folder is the model's snapshot in the local Hugging Face cache
	// (HF_HUB_CACHE, HF_HOME/hub or ~/.cache/huggingface/hub), read
	// offline. Exactly one of Path and Init.
	Path string `yaml:"path"`
	// Init creates a randomly initialized model (seeded by the recipe's
	// seed) with the built-in tokenizer sized to its vocabulary.
	Init *ModelInit `yaml:"init,omitempty"`
	// LoRA trains low-rank adapters instead of every weight. Absent: full
	// fine-tuning.
	LoRA *LoRA `yaml:"lora,omitempty"`
	// ValueHead adds a scalar value head on the policy's trunk (the PPO
	// critic). Required for algorithm ppo. Default false.
	ValueHead bool `yaml:"value_head"`
}

// ModelInit is the architecture of a randomly initialized model, with
// Hugging Face config.json's meaning.
type ModelInit struct {
	// Architecture is qwen2 or llama. Default qwen2.
	Architecture string `yaml:"architecture"`
	// VocabSize is vocab_size; at least 278 (the built-in tokenizer's
	// bytes and added tokens). Default 512.
	VocabSize int `yaml:"vocab_size"`
	// HiddenSize is hidden_size. Default 64.
	HiddenSize int `yaml:"hidden_size"`
	// IntermediateSize is intermediate_size (the MLP width). Default 192.
	IntermediateSize int `yaml:"intermediate_size"`
	// Layers is num_hidden_layers. Default 2.
	Layers int `yaml:"layers"`
	// Heads is num_attention_heads; it divides HiddenSize. Default 4.
	Heads int `yaml:"heads"`
	// KVHeads is num_key_value_heads; it divides Heads. Default: Heads.
	KVHeads int `yaml:"kv_heads"`
	// MaxPositions is max_position_embeddings: prompt plus response
	// tokens at most. Default 512.
	MaxPositions int `yaml:"max_positions"`
	// TieWordEmbeddings shares the embedding and output matrices.
	// Default true.
	TieWordEmbeddings bool `yaml:"tie_word_embeddings"`
}

// LoRA configures low-rank adapters (PEFT's layout).
type LoRA struct {
	// Rank is r; > 0. Default 8.
	Rank int `yaml:"rank"`
	// Alpha scales the adapter by Alpha/Rank; > 0. Default 16.
	Alpha float64 `yaml:"alpha"`
	// Dropout on the adapter input, in [0, 1). Default 0.
	Dropout float64 `yaml:"dropout"`
	// Targets are module names as PEFT spells them: q_proj, k_proj,
	// v_proj, o_proj, gate_proj, up_proj, down_proj. Default all seven.
	Targets []string `yaml:"targets,omitempty"`
	// Preset fills the fields not given: qv is rank 8, alpha 16, dropout
	// 0.1 on q_proj and v_proj. Default none.
	Preset string `yaml:"preset,omitempty"`
}

// Engines are the inference engines that generate rollouts.
type Engines struct {
	// Policy serves the policy (the solver).
	Policy Engine `yaml:"policy"`
	// Feedback serves MLMT's trainable feedback policy. Absent: the same
	// settings as Policy (a separate engine with the feedback weights).
	Feedback *Engine `yaml:"feedback,omitempty"`
}

// Engine is one inference engine setup.
type Engine struct {
	// Kind is native (the in-process Go engine; CPU or GPU: Device) or vllm (external
	// vLLM servers). Default native.
	Kind string `yaml:"kind"`
	// Replicas is the number of rollout actors for this engine; with vllm,
	// the servers are shared among them. Default 1.
	Replicas int `yaml:"replicas"`
	// MaxBatch is how many sequences one native engine decodes together.
	// Default 64.
	MaxBatch int `yaml:"max_batch"`
	// Device is where a native engine keeps its model, KV caches and
	// activations: cpu, or cuda / cuda-bf16 (bf16 products) with an
	// optional device index (cuda:1), as placement.learner_device. Default
	// cpu (a native feedback engine: the policy engine's); refused with
	// kind vllm.
	Device string `yaml:"device,omitempty"`
	// WeightSync is how new weights reach the engine: full (every weight),
	// lora (adapter deltas; needs the model's lora section) or, for vllm
	// only, reload (the server reloads a checkpoint directory it can read).
	// Default full, or lora when the model has a lora section.
	WeightSync string `yaml:"weight_sync"`
	// VLLM holds the vLLM servers; required with kind vllm, refused with
	// kind native.
	VLLM *VLLM `yaml:"vllm,omitempty"`
}

// VLLM points at running vLLM OpenAI-compatible servers, or has the run
// start its own (Launch).
type VLLM struct {
	// Servers are base URLs (http or https, no /v1 suffix). At least one,
	// unless Launch is set.
	Servers []string `yaml:"servers,omitempty"`
	// Launch has the run start its servers, as actors holding GPUs on the
	// nodes that launch vLLM (the run's own node; on a cluster, nodes
	// started with --vllm), and stop them when it ends. Instead of
	// Servers.
	Launch *VLLMLaunch `yaml:"launch,omitempty"`
	// Model is the served model name. Required.
	Model string `yaml:"model"`
	// APIKeyEnv names the environment variable holding the servers' API
	// key (their --api-key); the key itself never goes in a recipe.
	// Default: none (no Authorization header).
	APIKeyEnv string `yaml:"api_key_env"`
	// MaxInFlight bounds the requests outstanding at one server.
	// Default 64.
	MaxInFlight int `yaml:"max_in_flight"`
	// WeightUpdate is how the servers reload a full-weight checkpoint:
	// auto (ask each server once), disk (vLLM's weight-transfer API with
	// the disk backend, pull request #52152) or reload_weights
	// (collective_rpc reload_weights, a stock vLLM). Default auto.
	WeightUpdate string `yaml:"weight_update"`
}

// VLLMLaunch is how many vLLM servers a run starts and with what. Each
// runs `vllm serve MODEL` (MODEL the policy's models.*.path, or a copy
// fetched onto a node that does not see the run folder) with the served
// model name, its own port and API key,
// VLLM_SERVER_DEV_MODE=1 and CUDA_VISIBLE_DEVICES set to the GPUs it
// holds.
type VLLMLaunch struct {
	// Count is how many servers. Default 1; at most 64.
	Count int `yaml:"count"`
	// GPUs each server holds (its --tensor-parallel-size should match).
	// 0 runs one without a GPU. Default 1.
	GPUs float64 `yaml:"gpus"`
	// Args are more `vllm serve` options, from a list rlnode allows
	// (--dtype, --max-model-len, --gpu-memory-utilization,
	// --tensor-parallel-size, --enable-lora, ...: rollout/vllm.LaunchFlags);
	// nothing that runs the model folder's code or names other files.
	Args []string `yaml:"args,omitempty"`
	// StartTimeoutSeconds bounds a server's start until it answers
	// /health (loading the model, compiling its graphs). Default 1200;
	// at most 7200.
	StartTimeoutSeconds float64 `yaml:"start_timeout_seconds"`
}

// Data is where problems come from: a built-in task or a dataset file.
// Exactly one of Task and Dataset.
type Data struct {
	Task    *Task    `yaml:"task,omitempty"`
	Dataset *Dataset `yaml:"dataset,omitempty"`
	// Traces feeds the SFT warm-up (and with traces.train rl, the RL steps)
	// from a trace store instead of reference answers (generated episodes).
	// Default none.
	Traces *TracesData `yaml:"traces,omitempty"`
	// Verifier scores answers: math (\boxed{} answers, equivalence up to
	// form), gsm8k (the number after ####) or code (tests run in the
	// sandbox; needs python3). Default math.
	Verifier string `yaml:"verifier"`
	// VerifyWorkers bounds the verifications running at once; 0 is the
	// driver's default (the cores for code, 1 for math and gsm8k). At most
	// MaxVerifyWorkers; code verified in the driver, at most 2 per core
	// and what the host's memory holds at 1 GiB a program (a run checks).
	VerifyWorkers int `yaml:"verify_workers"`
	// VerifyOn is where code verifications run: driver (in the driver's
	// process) or cluster (as tasks of one CPU on any node of the
	// cluster with one free; verify_workers in flight, default the
	// cluster's CPUs). Default driver.
	VerifyOn string `yaml:"verify_on"`
}

// Task is the built-in seeded synthetic problem generator (rollout/task).
type Task struct {
	// Kinds are problem kinds: arithmetic, word, linear, sequence,
	// fraction, remainder. Default all, cycled.
	Kinds []string `yaml:"kinds,omitempty"`
	// Level is the difficulty 1..5; 0 spreads problems over all levels.
	// Default 0.
	Level int `yaml:"level"`
	// HeldOutPercent of the question space is held out for evaluation,
	// 1..99. Default 10.
	HeldOutPercent int `yaml:"held_out_percent"`
	// Seed seeds the generator. Default: the recipe's seed.
	Seed uint64 `yaml:"seed"`
}

// TracesData selects the recorded model calls a run trains on
// (docs/traces.md): every chat or completion call of the traces that pass
// the filters and whose reward is at least MinReward.
type TracesData struct {
	// Store is the trace store folder. Required.
	Store string `yaml:"store"`
	// Train is what trains on the calls: warmup (the SFT warm-up; plain,
	// or reward-weighted with sft.weighting) or rl (also the RL steps:
	// offline GRPO, algorithm.batch_prompts groups of algorithm.group_size
	// traces with the same first prompt a step, advantages from Reward;
	// no generation). Default warmup.
	Train string `yaml:"train,omitempty"`
	// Reward names the reward compared with MinReward, weighting the
	// warm-up (sft.weighting) and giving offline RL its advantages (""
	// sums all).
	Reward string `yaml:"reward"`
	// MinReward keeps calls whose reward is at least this. Default: every
	// call, rewarded or not.
	MinReward *float64 `yaml:"min_reward,omitempty"`
	// Agent, Model, Run and Source keep the traces with a span of that
	// agent, a call to that model, of that run, of that store partition.
	Agent  string `yaml:"agent"`
	Model  string `yaml:"model"`
	Run    string `yaml:"run"`
	Source string `yaml:"source"`
	// SkipRefused leaves out a trace whose calls cannot be aligned with
	// their token ids (or that holds calls of two models with Model
	// unset), counted and named once, instead of stopping the run.
	// Default false: one such trace stops it.
	SkipRefused bool `yaml:"skip_refused,omitempty"`
	// MergeCalls trains the calls of a conversation whose prompts extend
	// each other token for token as one row (the conversation computed
	// once); false makes every call its own row. Default true.
	MergeCalls *bool `yaml:"merge_calls,omitempty"`
}

// Dataset is a file of problems.
type Dataset struct {
	// Train is the training file: .jsonl, .parquet or .csv. Required.
	Train string `yaml:"train"`
	// Eval is the held-out file, same format and columns. Default: none;
	// then eval.held_out problems are split off the training file.
	Eval string `yaml:"eval"`
	// Columns map source columns (paths like "meta.answer" or
	// "messages.0.content") to fields. Default prompt: prompt, answer:
	// answer.
	Columns Columns `yaml:"columns"`
	// EvalColumns are the eval file's own columns when they differ from
	// the training file's (e.g. MATH-500's problem/answer beside a
	// training file's prompt/answer); a field left out is the one in
	// Columns. Needs Eval. Default: Columns.
	EvalColumns *Columns `yaml:"eval_columns,omitempty"`
	// Epochs bounds the passes over the training file; 0 is unbounded.
	// Default 0.
	Epochs int `yaml:"epochs"`
}

// Columns name the dataset columns (rollout/data.Mapping).
type Columns struct {
	// Prompt is the problem text. Default "prompt".
	Prompt string `yaml:"prompt"`
	// Answer is the reference answer (math, gsm8k). Default "answer"
	// (verifier code: none).
	Answer string `yaml:"answer"`
	// Tests are the code verifier's tests (a list, or one string).
	// Required with verifier code.
	Tests string `yaml:"tests"`
	// Setup is code run before the tests. Default none.
	Setup string `yaml:"setup"`
	// ID names a row. Default: FILE:ROW.
	ID string `yaml:"id"`
	// Hint is what only MLMT's feedback policy sees: read as .Hint when
	// its templates use it, then required in every row. Default "hint".
	Hint string `yaml:"hint"`
}

// Episode is how one problem becomes turns.
type Episode struct {
	// Type is single (one answer), mlmt (solver, feedback, refined
	// answer), score (SCoRe two-turn self-correction) or tools (multi-turn
	// tool use). Default single.
	Type string `yaml:"type"`
	// Templates are the prompt formats (Go text/template); empty fields
	// take the defaults (DefaultTemplates, rollout/episode's).
	Templates Templates `yaml:"templates"`
	// Tools are the tools of type tools: calculator, python. Default
	// [calculator].
	Tools []string `yaml:"tools,omitempty"`
	// MaxToolCalls bounds the tool calls of one episode. Default 4.
	MaxToolCalls int `yaml:"max_tool_calls"`
	// Agent is the agent episode's environment and returns; required
	// with type agent, absent otherwise.
	Agent *AgentEpisode `yaml:"agent,omitempty"`
}

// AgentEpisode is how the policy acts in a built-in environment
// (episode.type agent): each step's prompt is the template over the
// environment's observation, and the policy's turn is parsed for its
// last <action>name</action> or <action>name(value)</action>.
type AgentEpisode struct {
	// Env is the built-in environment: equations, calculator, multiply
	// (calculator's tasks without the calculate action) or guess; or http,
	// an environment served at URL. Required.
	Env string `yaml:"env"`
	// MaxSteps bounds an episode's steps (1..64). Default 8.
	MaxSteps int `yaml:"max_steps"`
	// Returns is what each step is credited with: episode (the episode's
	// total reward, every step alike) or discounted (the step's reward
	// plus gamma times the next step's return). Default episode.
	Returns string `yaml:"returns"`
	// Gamma discounts later rewards with returns discounted; in [0, 1].
	// Default 1.
	Gamma float64 `yaml:"gamma"`
	// Template is a step's prompt (Go text/template) over .Observation
	// (required), .Actions (the valid actions as written), .Taken (the
	// actions taken so far) and .Step. Default DefaultAgentTemplate.
	Template string `yaml:"template"`
	// URL is the environment server's base URL (http or https), with env
	// http: required then, absent otherwise. The server speaks the
	// protocol of rollout/env.HTTP.
	URL string `yaml:"url,omitempty"`
	// TimeoutSeconds bounds one request to the server (env http); 0: 30.
	TimeoutSeconds float64 `yaml:"timeout_seconds,omitempty"`
	// Retries is how many more times a request the server could not serve
	// is sent (env http); 0: 3, -1: none.
	Retries int `yaml:"retries,omitempty"`
}

// DefaultAgentTemplate is the default prompt of an agent step.
const DefaultAgentTemplate = "{{.Observation}}\nActions: {{.Actions}}\n"

func (a *AgentEpisode) setDefaults() {
	*a = AgentEpisode{MaxSteps: 8, Returns: "episode", Gamma: 1, Template: DefaultAgentTemplate}
}

// Defaults of adaptive entropy control (algorithm.entropy_target).
// DefaultEntropyCoefStep is Skywork-OR1's Δ. DefaultEntropyCoefMax is ten
// such steps: the bonus a policy gets after ten RL steps below the target
// in a row, five times the usual fixed 0.01, and a bound on how far a
// coefficient can overshoot before the entropy answers.
const (
	DefaultEntropyCoefStep = 0.005
	DefaultEntropyCoefMax  = 0.05
	// MaxEntropyCoef bounds entropy_coef_max (the learner refuses a
	// coefficient above it).
	MaxEntropyCoef = 1.0
)

// Algorithm is the RL algorithm and its hyper-parameters.
type Algorithm struct {
	// Name is grpo, ppo (with the value head as critic), rloo,
	// reinforce_pp (REINFORCE++; also spelled reinforce++), drgrpo
	// (Dr.GRPO; also dr_grpo), rw_sft (reward-weighted SFT) or archer
	// (ArCHer's actor-critic: algorithm.archer). Default grpo.
	Name string `yaml:"name"`
	// GroupSize is the number of samples per prompt; at least 2 for grpo,
	// drgrpo and rloo. Default 8.
	GroupSize int `yaml:"group_size"`
	// BatchPrompts is the number of prompts per step. Default 16.
	BatchPrompts int `yaml:"batch_prompts"`
	// MaxTokens bounds each generated turn. Default 256.
	MaxTokens int `yaml:"max_tokens"`
	// Temperature of rollout sampling; > 0 when GroupSize > 1. Default 1.
	Temperature float64 `yaml:"temperature"`
	// TopP is the nucleus mass, (0, 1]. Default 1 (off).
	TopP float64 `yaml:"top_p"`
	// ClipLow and ClipHigh bound the ratio to [1−low, 1+high]; low in
	// [0, 1). Default 0.2 and 0.28 (DAPO's clip-higher; PPO's is 0.2).
	ClipLow  float64 `yaml:"clip_low"`
	ClipHigh float64 `yaml:"clip_high"`
	// DualClip is dual-clip PPO's c, 0 (off) or > 1. Default 0.
	DualClip float64 `yaml:"dual_clip"`
	// KLCoef weighs KL(π‖π_ref) in the loss; ≥ 0. Default 0 (no reference
	// model is loaded).
	KLCoef float64 `yaml:"kl_coef"`
	// KLEstimator is k1, k2 or k3. Default k3.
	KLEstimator string `yaml:"kl_estimator"`
	// KLInReward (ppo only, with KLCoef > 0) subtracts KLCoef·KL from
	// every response token's reward before GAE instead of adding the KL
	// to the loss (InstructGPT's and TRL's PPO). Default false.
	KLInReward bool `yaml:"kl_in_reward"`
	// EntropyCoef weighs the entropy bonus; ≥ 0. Default 0. With
	// EntropyTarget it is the adapted coefficient's starting value.
	EntropyCoef float64 `yaml:"entropy_coef"`
	// EntropyTarget, when set, adapts each trained policy's entropy
	// coefficient after every RL step toward this mean token entropy (nats,
	// > 0; Skywork-OR1's adaptive entropy control): a step below it raises
	// the coefficient by EntropyCoefStep, a step above lowers it, within
	// [0, EntropyCoefMax], and the bonus is applied only while the policy's
	// last measured entropy is below the target. Absent: entropy_coef is a
	// fixed bonus.
	EntropyTarget *float64 `yaml:"entropy_target,omitempty"`
	// EntropyCoefStep is the coefficient's change per RL step, ≥ 0;
	// EntropyCoefMax its ceiling, in [entropy_coef, 1]. Only with
	// EntropyTarget. Default DefaultEntropyCoefStep, DefaultEntropyCoefMax.
	EntropyCoefStep *float64 `yaml:"entropy_coef_step,omitempty"`
	EntropyCoefMax  *float64 `yaml:"entropy_coef_max,omitempty"`
	// Aggregation is token-mean, seq-mean-token-mean or
	// seq-mean-token-sum-norm. Default token-mean (drgrpo:
	// seq-mean-token-sum-norm).
	Aggregation string `yaml:"aggregation"`
	// TISCap caps truncated importance sampling between the engine's and
	// the learner's logprobs; 0 is off. Default 0 (async: 2).
	TISCap float64 `yaml:"tis_cap"`
	// LR is the peak learning rate; > 0. Default 1e-5.
	LR float64 `yaml:"lr"`
	// MinLR is where cosine decays to, in [0, lr]. Default 0.
	MinLR float64 `yaml:"min_lr"`
	// Schedule is constant or cosine. Default constant.
	Schedule string `yaml:"schedule"`
	// Warmup is the number of linear warm-up steps, ≤ schedule.steps.
	// Default 0.
	Warmup int `yaml:"warmup"`
	// WeightDecay is AdamW's decoupled weight decay. Default 0.
	WeightDecay float64 `yaml:"weight_decay"`
	// AdamBeta1, AdamBeta2 in [0, 1) and AdamEps > 0 are AdamW's.
	// Default 0.9, 0.999, 1e-8.
	AdamBeta1 float64 `yaml:"adam_beta1"`
	AdamBeta2 float64 `yaml:"adam_beta2"`
	AdamEps   float64 `yaml:"adam_eps"`
	// GradClip is the global gradient-norm limit; 0 is off. Default 1.
	GradClip float64 `yaml:"grad_clip"`
	// MicroBatch is the number of sequences per forward/backward pass.
	// Default 32.
	MicroBatch int `yaml:"micro_batch"`
	// ActivationCheckpointing keeps only each decoder layer's input through
	// the forward pass and recomputes the layer during backward: less
	// memory, one more forward pass, the same gradients. Default false.
	ActivationCheckpointing bool `yaml:"activation_checkpointing,omitempty"`
	// ActivationsBF16 keeps the decoder layers' activations as bf16
	// between the forward and the backward pass: about half their memory,
	// gradients within bf16 rounding of float32's. Default false.
	ActivationsBF16 bool `yaml:"activations_bf16,omitempty"`
	// Epochs is the number of passes over each batch (PPO epochs).
	// Default 1.
	Epochs int `yaml:"epochs"`
	// MiniBatches splits each pass into this many optimizer steps (PPO's
	// mini-batches). Default 1.
	MiniBatches int `yaml:"mini_batches"`
	// Gamma is the discount of ppo and reinforce_pp, Lambda the GAE λ of
	// ppo, both in [0, 1]. Default 1 and 0.95.
	Gamma  float64 `yaml:"gamma"`
	Lambda float64 `yaml:"lambda"`
	// ValueCoef weighs the value loss (ppo). Default 0.5.
	ValueCoef float64 `yaml:"value_coef"`
	// ValueClip clips value updates (ppo); 0 is off. Default 0.2.
	ValueClip float64 `yaml:"value_clip"`
	// RWSFT configures rw_sft.
	RWSFT RWSFT `yaml:"rw_sft"`
	// MLMT configures the training of mlmt episodes.
	MLMT MLMT `yaml:"mlmt"`
	// Score configures the training of score episodes.
	Score Score `yaml:"score"`
	// BiLevel makes an mlmt run bi-level MLMT-RL (BiLevel SCoRe): a
	// learned value V_L on the feedback policy's value head is the
	// solver's baseline and may shape the feedback policy's reward.
	// Absent: off.
	BiLevel *BiLevel `yaml:"bi_level,omitempty"`
	// Archer configures algorithm archer (ArCHer); absent with archer:
	// its defaults.
	Archer *Archer `yaml:"archer,omitempty"`
	// TextualAC makes an mlmt run the textual actor-critic (hierarchical
	// in-context RL): the feedback policy is a context generator writing
	// before the answer it serves (its template and the refine template
	// do not use .Attempt), rewarded with the solver's success, its
	// confidence in the verified answer given the context and the
	// dependence of its answer on the context. Absent: off.
	TextualAC *TextualAC `yaml:"textual_ac,omitempty"`
}

// Archer configures ArCHer, the hierarchical actor-critic: an
// utterance-level critic, Q(s, a) and V(s) on two small models of the
// policy's shape, trained off-policy on turns replayed from a buffer
// against target copies that follow it by Polyak averaging (Q on
// r + gamma·V'(s'), V on Q'(s, a)); the policy's token-level gradient
// takes each turn's advantage Q(s, a) − V(s). Single-turn episodes are one
// utterance each; score and mlmt episodes' solver turns are a chain, the
// final answer's reward at its end.
type Archer struct {
	// CriticLR is the critic's AdamW learning rate; > 0. Default 1e-4.
	CriticLR float64 `yaml:"critic_lr"`
	// Tau is the Polyak rate of the target critic, in (0, 1]. Default 0.1.
	Tau float64 `yaml:"tau"`
	// Gamma discounts V'(s') of the next turn, in [0, 1]. Default 0.95.
	Gamma float64 `yaml:"gamma"`
	// BufferSize is the replay buffer's capacity in turns (the oldest go
	// first), 1 to 1,000,000. Default 100000.
	BufferSize int `yaml:"buffer_size"`
	// CriticUpdatesPerStep is the critic's optimizer steps per RL step,
	// each on CriticBatchSize turns drawn from the buffer (with
	// replacement), 1 to 1,000. Defaults 10 and 64 (1 to 4,096).
	CriticUpdatesPerStep int `yaml:"critic_updates_per_step"`
	CriticBatchSize      int `yaml:"critic_batch_size"`
	// WarmupSteps are RL steps that fill the buffer and train the critic
	// without a policy update (with as many as schedule.steps or more,
	// only the critic trains). Default 10.
	WarmupSteps int `yaml:"warmup_steps"`
	// CriticInit is policy (the critic's two models start as copies of
	// the policy after the SFT warm-up, with fresh heads) or scratch
	// (random weights). Default policy.
	CriticInit string `yaml:"critic_init"`
}

// TextualAC configures the context generator's reward R = success +
// confidence_coef·(mean log π_L(y* | x, c)) + dependence_coef·(log π_L(y |
// x, c) − log π_L(y | x)), y* the verified answer, y the solver's answer
// with the context (a one-sample estimate of the KL between the solver's
// answer distributions with and without it).
type TextualAC struct {
	// ConfidenceCoef weighs the solver's mean per-token log-probability
	// of the verified answer given the context; ≥ 0. Default 0.1.
	ConfidenceCoef float64 `yaml:"confidence_coef"`
	// DependenceCoef weighs the with/without-context KL estimate (the
	// KL-maximisation term); ≥ 0. Default 0.05.
	DependenceCoef float64 `yaml:"dependence_coef"`
}

// BiLevel configures bi-level MLMT-RL. One reward R on the refined answer
// ŷ trains both levels: the solver's two turns on (R − V_L)·(log π(z) +
// log π(ŷ)), the value head on (V_L − R)², the feedback policy (GRPO) on
// R + value_coef·V_L.
type BiLevel struct {
	// ValueCoef is c of the feedback policy's shaped reward R + c·V_L;
	// 0 turns the shaping off. Default 0.1.
	ValueCoef float64 `yaml:"value_coef"`
	// ValueLossCoef weighs (V_L − R)² in the feedback learner's loss;
	// > 0. Default 1.
	ValueLossCoef float64 `yaml:"value_loss_coef"`
	// StopValueGradients is the stop-grad variant: the value loss trains
	// the value head alone, no gradient of it reaches the feedback
	// model's trunk. Default false (full gradient).
	StopValueGradients bool `yaml:"stop_value_gradients"`
	// TrainGuidanceModel trains the feedback policy by RL; false keeps it
	// fixed and trains only the value. Default true.
	TrainGuidanceModel bool `yaml:"train_guidance_model"`
	// GuidanceLR is the feedback learner's learning rate; 0 is
	// algorithm.mlmt.feedback_lr's. Default 0.
	GuidanceLR float64 `yaml:"guidance_lr"`
	// GuidanceKLCoef weighs the feedback policy's KL to its own initial
	// (post-warm-up) weights, estimated by algorithm.kl_estimator; ≥ 0.
	// Default 0.05.
	GuidanceKLCoef float64 `yaml:"guidance_kl_coef"`
}

// Score configures SCoRe's reward shaping.
type Score struct {
	// Alpha weighs the second turn's improvement: its reward is
	// r2 + alpha·(r2 − r1) (SCoRe's stage-II bonus); ≥ 0. Default 1.
	Alpha float64 `yaml:"alpha"`
	// Stage1Steps is SCoRe's stage I (episode.type score): the first
	// stage1_steps RL steps train the second attempt on r2 alone (no
	// alpha) and hold the first attempt to the KL reference by the KL
	// alone, weighted stage1_kl_coef; stage II (both attempts, the second
	// on the shaped reward, algorithm.kl_coef on both) follows; stage I
	// lasts min(stage1_steps, schedule.steps). Needs algorithm.kl_coef >
	// 0. Default 0: stage II only.
	Stage1Steps int `yaml:"stage1_steps"`
	// Stage1KLCoef is stage I's KL coefficient of the first attempt (the
	// reference's β2); > 0 when stage1_steps is set. Default 0.1.
	Stage1KLCoef float64 `yaml:"stage1_kl_coef"`
}

// RWSFT configures reward-weighted SFT.
type RWSFT struct {
	// Weighting is exp (weights ∝ exp(reward/beta), normalized) or filter
	// (weight 1 when reward ≥ threshold, else 0). Default exp.
	Weighting string `yaml:"weighting"`
	// Beta is exp's temperature; > 0. Default 1.
	Beta float64 `yaml:"beta"`
	// Threshold is filter's reward cut. Default 1.
	Threshold float64 `yaml:"threshold"`
}

// MLMT configures which policies of the three-turn episode train, and how.
type MLMT struct {
	// Train lists the trained policies: solver, feedback. Default both
	// (only solver with static feedback).
	Train []string `yaml:"train,omitempty"`
	// StopGradient is the stop-gradient variant: the solver's refine turn
	// (turn 3) gets no gradient — the solver learns from its first
	// attempt only, while the feedback policy learns from the refined
	// answer's reward. Default false (both solver turns train).
	StopGradient bool `yaml:"stop_gradient"`
	// StaticFeedback replaces the feedback policy by the fixed
	// episode.templates.static_feedback text (the baseline MLMT-RL is
	// compared with). Needs models.feedback and engines.feedback absent.
	// Default false.
	StaticFeedback bool `yaml:"static_feedback"`
	// FeedbackReward is what the feedback turn is rewarded with: final
	// (the refined answer's reward) or improvement (final minus the first
	// attempt's). Default final.
	FeedbackReward string `yaml:"feedback_reward"`
	// FeedbackAlgorithm is the feedback policy's RL algorithm (one of
	// algorithm.name's; ppo needs models.feedback.value_head) and
	// FeedbackLR its learning rate; the other hyper-parameters are the
	// algorithm section's. Default algorithm.name and algorithm.lr;
	// ignored with static feedback.
	FeedbackAlgorithm string  `yaml:"feedback_algorithm"`
	FeedbackLR        float64 `yaml:"feedback_lr"`
	// RefineReward is the solver's refine turn's reward: final (also
	// empty: the refined answer's, r2) or shaped (SCoRe's r2 +
	// alpha·(r2 − r1), alpha algorithm.score.alpha: RL-guided SCoRe).
	// Default final, left empty so that a resolved recipe without it
	// reads as before.
	RefineReward string `yaml:"refine_reward,omitempty"`
	// UpdateRatio alternates the levels' updates, "H:L": of every H + L
	// RL steps the first H train the feedback policy only, the next L the
	// solver only (the reference's HLT_LLT_RR_1_15 is "1:15"); episodes
	// are played every step. Needs both policies in train. Default empty:
	// both train every step.
	UpdateRatio string `yaml:"update_ratio,omitempty"`
	// SharedWeights plays the feedback role with the policy's model: one
	// model in two roles (one learner, one engine), told apart by their
	// prompts; models.feedback and engines.feedback absent, the feedback
	// policy's algorithm and lr the policy's. Needs both in train.
	// Default false: a model of its own.
	SharedWeights bool `yaml:"shared_weights,omitempty"`
}

// SFT is the supervised warm-up before RL, on reference answers, so that
// a model trained from scratch starts with a reward above zero.
type SFT struct {
	// Steps of SFT; 0 skips the warm-up. Default 0.
	Steps int `yaml:"steps"`
	// BatchSize is the number of examples per step. Default 32.
	BatchSize int `yaml:"batch_size"`
	// LR is the SFT learning rate (constant); > 0. Default 1e-4.
	LR float64 `yaml:"lr"`
	// Response is the target text (Go text/template over .Problem and
	// .Answer). Default `\boxed{ {{- .Answer -}} }`: \boxed{ANSWER}.
	Response string `yaml:"response"`
	// FeedbackResponse is MLMT's feedback policy's target (over .Problem,
	// .Hint, .AnyHint, .Answer, .Attempt). Needed by an mlmt run with a
	// feedback policy and sft.steps > 0. Default none. .AnyHint is a hint
	// of the same form that says nothing of the problem (for the pick
	// task, a position drawn at random; for a dataset, another training
	// row's hint): a target with it teaches the form of feedback and
	// leaves what to say to RL.
	FeedbackResponse string `yaml:"feedback_response"`
	// RefineFeedback is the feedback the solver's warm-up refine prompts
	// show (over the same fields). Default: FeedbackResponse's text. With
	// feedback_response " take the {{.AnyHint}}" and refine_feedback
	// " take the {{.Hint}}" the solver learns to follow feedback that
	// names the hint, while the feedback policy must learn from the
	// verifier's reward to name it.
	RefineFeedback string `yaml:"refine_feedback,omitempty"`
	// Trajectories, when set, is the warm-up's data: a JSONL file of agent
	// episodes (rlnode env rollout) or a run's Arrow trajectory file
	// (.arrow). Each warm-up step trains the policy on BatchSize of its
	// samples (one per assistant turn) instead of problems with Response.
	// Default none.
	Trajectories string `yaml:"trajectories,omitempty"`
	// Weighting weighs trajectory samples by their episode's return: none
	// (plain SFT), exp (exp(return/Beta), normalized to mean 1 over the
	// batch) or filter (only samples whose return is at least Threshold).
	// Default none.
	Weighting string  `yaml:"weighting,omitempty"`
	Beta      float64 `yaml:"beta,omitempty"`      // exp's temperature; > 0. Default 1.
	Threshold float64 `yaml:"threshold,omitempty"` // filter's cut. Default 0.
	// LoRA, with models.policy.lora, makes the warm-up train the adapters
	// (they start at its first step) instead of every weight; RL goes on
	// with the same adapters. Default false.
	LoRA bool `yaml:"lora,omitempty"`
	// Collect, in an agent run on a built-in environment, is the warm-up's
	// data instead of a file: episodes of the environment's scripted
	// teacher and of random play on its train split, played when the run
	// starts, each step's prompt in the run's episode.agent.template.
	// Weighted like Trajectories. Default none.
	Collect *SFTCollect `yaml:"collect,omitempty"`
	// BaseSteps, with LoRA, are the warm-up's first steps: plain SFT of
	// every weight on all the warm-up's samples (the base); the adapters
	// start after them and train with Weighting. Default 0.
	BaseSteps int `yaml:"base_steps,omitempty"`
	// Until, in an agent run, ends the warm-up before Steps once the
	// policy solves enough of the environment's training tasks (greedy,
	// measured every Until.Every steps). Default none: Steps warm-up steps.
	Until *SFTUntil `yaml:"until,omitempty"`
}

// SFTUntil is sft.until: the warm-up ends after the first probe whose
// completion rate on Episodes training tasks is at least Completion.
type SFTUntil struct {
	Completion float64 `yaml:"completion"`         // in (0, 1]
	Every      int     `yaml:"every,omitempty"`    // warm-up steps between probes; default 10
	Episodes   int     `yaml:"episodes,omitempty"` // training tasks a probe plays; default 64
}

// DefaultSFTUntil are sft.until's defaults besides Completion.
const (
	DefaultUntilEvery    = 10
	DefaultUntilEpisodes = 64
	MaxUntilEpisodes     = 4096
)

// SFTCollect is how many episodes sft.collect plays of each policy.
type SFTCollect struct {
	Teacher int `yaml:"teacher"` // the scripted teacher's episodes
	Random  int `yaml:"random"`  // random play's (an offered action, a parameter from -10..10)
}

// Placement says where actors run.
type Placement struct {
	// Mode is colocated (rollout and learner share the nodes and take
	// turns) or split (rollout actors and learner shards on separate
	// resources). Default colocated.
	Mode string `yaml:"mode"`
	// Rollout is what each rollout actor reserves. Default 1 CPU.
	Rollout Resources `yaml:"rollout"`
	// Learner is what each learner shard reserves. Default 1 CPU.
	Learner Resources `yaml:"learner"`
	// LearnerShards is the number of data-parallel learner shards.
	// Default 1.
	LearnerShards int `yaml:"learner_shards"`
	// LearnerDevice is where each learner shard keeps its model: cpu (the
	// default, also when empty), cuda (the GPU backend, fp32) or cuda-bf16
	// (the GPU backend with bf16 matrix products). A cuda value on a host
	// where the backend cannot run is refused with the reason.
	LearnerDevice string `yaml:"learner_device,omitempty"`
}

// Resources an actor reserves on its node.
type Resources struct {
	CPUs float64 `yaml:"cpus"`
	GPUs float64 `yaml:"gpus"`
	// Memory is the host memory each actor reserves (the node resource
	// "memory"), a size: 16GiB, 500MB, plain bytes. Empty: what the actor
	// certainly holds (a rollout actor its model's weights, a learner
	// rank its weights, gradients and AdamW moments on the CPU).
	Memory string `yaml:"memory,omitempty"`
	// Custom are node resources by name (rlnode join --resource NAME=N).
	Custom map[string]float64 `yaml:"custom,omitempty"`
}

// Schedule is how long the run is and how often it evaluates and saves.
type Schedule struct {
	// Steps is the number of RL steps; > 0. Default 100.
	Steps int `yaml:"steps"`
	// EvalEvery evaluates every N steps (and after the last); 0 only after
	// the last. Default 10.
	EvalEvery int `yaml:"eval_every"`
	// CheckpointEvery saves every N-th step of each phase (warm-up steps
	// counted from the first, RL steps from the first RL step), and always
	// the warm-up's last step and the run's last; 0 only those. Default 0.
	CheckpointEvery int `yaml:"checkpoint_every"`
}

// Eval is the periodic evaluation on held-out problems.
type Eval struct {
	// HeldOut is the number of held-out problems per evaluation; > 0.
	// Default 100.
	HeldOut int `yaml:"held_out"`
	// Samples per problem (accuracy averages them: mean@n); > 1 needs
	// Temperature > 0. Default 1.
	Samples int `yaml:"samples"`
	// Temperature of evaluation sampling; 0 is greedy. Default 0.
	Temperature float64 `yaml:"temperature"`
	// PassK are the k of pass@k written at sampled evaluations, ascending,
	// each in 1..Samples. Default (with Temperature > 0): 1 and Samples.
	PassK []int `yaml:"pass_k,omitempty"`
	// Metrics are written to metrics.jsonl at evaluation steps: accuracy,
	// reward_mean, response_length, and for mlmt and score episodes
	// turn1_accuracy, turn3_accuracy (mlmt; score: the second turn),
	// delta (final minus first), incorrect_to_correct, correct_to_incorrect,
	// and for mlmt with a feedback policy turn3_accuracy_static (turn 3
	// with the static feedback text instead, on the same problems).
	// Default [accuracy, reward_mean], plus the turn metrics for mlmt and
	// score, plus turn3_accuracy_static for mlmt with a feedback policy.
	Metrics []string `yaml:"metrics,omitempty"`
	// GroupBy are columns of the evaluation rows (a dataset's, e.g.
	// MATH-500's subject and level) by whose values accuracy (and with
	// sampling pass@k) is also reported: `rlnode eval` prints a table
	// and writes them as JSON. Needs data.dataset; at most 8 columns.
	// Default none.
	GroupBy []string `yaml:"group_by,omitempty"`
}

// MaxGroupBy bounds eval.group_by.
const MaxGroupBy = 8

// Checkpoint says what a checkpoint keeps.
type Checkpoint struct {
	// Keep is how many checkpoints stay on disk (oldest removed); 0 keeps
	// all. Default 3.
	Keep int `yaml:"keep"`
	// Optimizer saves the optimizer state too (needed by --resume).
	// Default true.
	Optimizer bool `yaml:"optimizer"`
}

// Sync is how generation and training overlap.
type Sync struct {
	// Mode is sync (on-policy: generation waits for the new weights) or
	// async (generation of step t+1 overlaps training of step t).
	// Default sync.
	Mode string `yaml:"mode"`
	// MaxStaleness is async's bound on how many versions a trajectory's
	// policy may lag the learner's, ≥ 1 with async, 0 with sync; async
	// generates up to that many steps ahead. Default 0 (async: 1).
	MaxStaleness int `yaml:"max_staleness"`
}

// Default returns a recipe with every default that does not depend on
// other fields; Resolve fills the rest.
func Default() *Recipe {
	return &Recipe{
		Seed:    1,
		Models:  Models{Policy: Model{}},
		Engines: Engines{Policy: defaultEngine()},
		Data:    Data{Verifier: "math", VerifyOn: "driver"},
		Episode: Episode{Type: "single", MaxToolCalls: 4},
		Algorithm: Algorithm{
			Name: "grpo", GroupSize: 8, BatchPrompts: 16, MaxTokens: 256, Temperature: 1, TopP: 1,
			ClipLow: 0.2, ClipHigh: 0.28, KLEstimator: "k3", LR: 1e-5, Schedule: "constant",
			AdamBeta1: 0.9, AdamBeta2: 0.999, AdamEps: 1e-8,
			GradClip: 1, MicroBatch: 32, Epochs: 1, MiniBatches: 1, Gamma: 1, Lambda: 0.95, ValueCoef: 0.5, ValueClip: 0.2,
			RWSFT: RWSFT{Weighting: "exp", Beta: 1, Threshold: 1},
			MLMT:  MLMT{FeedbackReward: "final"},
			Score: Score{Alpha: 1, Stage1KLCoef: 0.1},
		},
		SFT:        SFT{BatchSize: 32, LR: 1e-4, Response: `\boxed{ {{- .Answer -}} }`},
		Placement:  Placement{Mode: "colocated", Rollout: Resources{CPUs: 1}, Learner: Resources{CPUs: 1}, LearnerShards: 1},
		Schedule:   Schedule{Steps: 100, EvalEvery: 10},
		Eval:       Eval{HeldOut: 100, Samples: 1},
		Checkpoint: Checkpoint{Keep: 3, Optimizer: true},
		Sync:       Sync{Mode: "sync"},
	}
}

func defaultEngine() Engine { return Engine{Kind: "native", Replicas: 1, MaxBatch: 64} }

// The decoder calls setDefaults on structs it allocates for a section that
// is absent from the defaults (pointer fields).
func (m *ModelInit) setDefaults() {
	*m = ModelInit{Architecture: "qwen2", VocabSize: 512, HiddenSize: 64, IntermediateSize: 192,
		Layers: 2, Heads: 4, MaxPositions: 512, TieWordEmbeddings: true}
}

func (l *LoRA) setDefaults() {
	*l = LoRA{Rank: 8, Alpha: 16, Targets: []string{"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}}
}

func (e *Engine) setDefaults() { *e = defaultEngine() }

func (b *BiLevel) setDefaults() {
	*b = BiLevel{ValueCoef: 0.1, ValueLossCoef: 1, TrainGuidanceModel: true, GuidanceKLCoef: 0.05}
}

func (a *Archer) setDefaults() { *a = DefaultArcher() }

// DefaultArcher is the archer section's defaults.
func DefaultArcher() Archer {
	return Archer{CriticLR: 1e-4, Tau: 0.1, Gamma: 0.95, BufferSize: 100000, CriticUpdatesPerStep: 10,
		CriticBatchSize: 64, WarmupSteps: 10, CriticInit: "policy"}
}

func (t *TextualAC) setDefaults() { *t = TextualAC{ConfidenceCoef: 0.1, DependenceCoef: 0.05} }

func (v *VLLM) setDefaults() { *v = VLLM{MaxInFlight: 64, WeightUpdate: "auto"} }

func (l *VLLMLaunch) setDefaults() { *l = VLLMLaunch{Count: 1, GPUs: 1, StartTimeoutSeconds: 1200} }

func (t *Task) setDefaults() { *t = Task{HeldOutPercent: 10} }

func (d *Dataset) setDefaults() {
	*d = Dataset{Columns: Columns{Prompt: "prompt", Answer: "answer", Hint: "hint"}}
}
