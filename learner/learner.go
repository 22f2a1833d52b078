package learner

import (
	"context"
	"fmt"
	"io"
	"math"
	"strings"

	"github.com/rlnode/rlnode/learner/backend"
	"github.com/rlnode/rlnode/learner/cuda"
	"github.com/rlnode/rlnode/learner/model"
	"github.com/rlnode/rlnode/learner/optim"
	"github.com/rlnode/rlnode/learner/rl"
)

// Algorithms the learner trains with (Config.Algorithm).
const (
	GRPO        = "grpo"        // group-normalized advantages (r−mean)/(std+ε), PPO clipped loss
	DrGRPO      = "dr_grpo"     // group-centred advantages, seq-mean-token-sum-norm aggregation
	RLOO        = "rloo"        // leave-one-out baseline
	ReinforcePP = "reinforce++" // discounted returns whitened over the batch
	PPO         = "ppo"         // value head (shared-trunk critic), GAE, clipped policy + value loss
	RWSFT       = "rw_sft"      // reward-weighted SFT: NLL weighted by exp(r/β)-normalized weights
	SFT         = "sft"         // plain NLL of the responses (warm-up)
)

// Algorithms lists every algorithm name.
var Algorithms = []string{GRPO, DrGRPO, RLOO, ReinforcePP, PPO, RWSFT, SFT}

// Config is what a learner is built from. DefaultConfig fills every field
// with a working value; Validate names the field that is wrong.
type Config struct {
	// ModelDir is a checkpoint directory (config.json + safetensors) to
	// start from. When empty, Model gives the architecture of a model
	// initialized at random with Seed.
	ModelDir string
	Model    *model.Config
	Seed     uint64

	Algorithm string

	// Learning rate of the RL phase: linear warm-up over WarmupSteps to
	// LR, then cosine decay to MinLR at TotalSteps; TotalSteps 0 keeps LR
	// constant after warm-up. Steps count optimizer steps from the RL
	// phase's first (the first Train with an algorithm other than SFT), so
	// an SFT warm-up before it does not eat into the schedule; SFT trains
	// at the constant rate SetAlgorithm gives it (LR when none).
	LR, MinLR               float64
	WarmupSteps, TotalSteps int
	// AdamW.
	Beta1, Beta2, Eps, WeightDecay float64
	// MaxGradNorm clips the global gradient norm; 0 turns clipping off.
	MaxGradNorm float64

	// Loss configures the PPO clipped surrogate (clip-higher, dual-clip,
	// TIS cap, KL to the frozen reference, entropy bonus,
	// aggregation). SFT and RWSFT use only its Aggregation.
	Loss rl.PolicyLossConfig
	// KLInReward, with PPO and Loss.KLCoef > 0, makes the KL to the
	// reference a reward penalty instead of a loss term: every response
	// token's reward gets −KLCoef·KL (Loss.KL's estimator, of the
	// pre-step log probabilities against the reference's) before GAE, as
	// InstructGPT's and TRL's PPO do. Other algorithms refuse it; the SFT
	// warm-up ignores it.
	KLInReward bool
	// RefModelDir, with Loss.KLCoef > 0, is the KL reference: a frozen
	// checkpoint directory with the policy's vocabulary (reference.go).
	// Empty: the initial policy.
	RefModelDir string
	// MaxResponseLen is Dr.GRPO's constant normalizer (the longest
	// response the engine may produce).
	MaxResponseLen int

	// MicroBatchSeqs sequences go through forward/backward at once;
	// gradients accumulate over micro-batches.
	MicroBatchSeqs int
	// MiniBatches splits each Train batch into this many optimizer steps
	// (PPO's mini-batches); with more than one, the old log probabilities
	// are computed by a forward pass before the first step, so the ratio
	// and the clipping are meaningful.
	MiniBatches int
	// Epochs is the number of passes over each Train batch (PPO epochs):
	// Epochs×MiniBatches optimizer steps against the old log probabilities,
	// values and advantages fixed before the first. 0 and 1 are one pass.
	Epochs int

	// PPO: GAE discount and λ, value-loss weight and clip. REINFORCE++
	// uses Gamma.
	Gamma, Lambda     float64
	VFCoef, ValueClip float64
	// RWBeta is the temperature of reward-weighted SFT's weights.
	RWBeta float64
	// RWFilter makes reward-weighted SFT's weights 1 for sequences whose
	// reward is at least RWThreshold and 0 for the rest (rejection
	// sampling) instead of exp(r/RWBeta).
	RWFilter    bool
	RWThreshold float64

	// ValueBaseline, with a policy-gradient algorithm other than PPO,
	// gives the model a value head whose value at each sequence's last
	// loss token learns the sequence's reward (bi-level MLMT's V_L;
	// valuebaseline.go). Nil: none.
	ValueBaseline *ValueBaseline

	// Shards is the number of data-parallel learner ranks (recipe field
	// learner.shards); 0 and 1 mean one unsharded learner. Every rank holds
	// the whole policy, trains on its slice of each batch, and the ranks'
	// gradients are summed by package learner/shard.
	Shards int
	// ZeROStage, with Shards > 1: 0 keeps the whole AdamW state on every
	// rank; 1 (ZeRO-1) gives each rank the state of its slice of the
	// parameters only, and the updated slices are all-gathered.
	ZeROStage int

	// OmitOptimizer makes checkpoints leave out the AdamW state (recipe
	// checkpoint.optimizer: false): smaller, and a learner loading one
	// starts AdamW afresh (zero moments, step count 0) at the checkpoint's
	// weights, step and schedule (checkpoint.go).
	OmitOptimizer bool

	// Device is where the model lives: "" or "cpu" (the CPU backend),
	// "cuda" (fp32) or "cuda-bf16" (bf16 matrix products) on the GPU
	// cuda.PickGPU picks (a given index, "cuda:1"; Slurm's SLURM_LOCALID;
	// else device 0 of those CUDA_VISIBLE_DEVICES leaves); see learner/cuda.
	Device string
	// CheckpointActivations recomputes each decoder layer's activations in
	// the backward pass instead of keeping them (model.Model's
	// CheckpointActivations).
	CheckpointActivations bool
	// ActivationsBF16 keeps the decoder layers' activations as bf16
	// between the forward and the backward pass (model.Model's
	// ActivationsBF16): about half their memory, gradients within the
	// rounding of float32's.
	ActivationsBF16 bool

	// Backend, when set, builds the model's backend instead of Device: a
	// caller's own device in the same process (an emulated GPU in tests).
	// It does not travel to other processes.
	Backend func() (backend.Backend, error) `json:"-" msgpack:"-"`

	// LoRA, when set, makes every algorithm but SFT train low-rank
	// adapters on the frozen policy (lora.go): they are added at the first
	// Train with such an algorithm, and stay. An SFT warm-up before them
	// trains every weight; the RL after it trains only the adapters (and a
	// PPO value head) on top of the warmed-up base, with optimizer state
	// for those alone.
	LoRA *model.LoRAConfig
	// LoRAWarmup, with LoRA, makes SFT train the adapters too: they start
	// at the first Train whatever its algorithm (an SFT warm-up trains
	// them, and RL goes on with them) instead of every weight.
	LoRAWarmup bool
	// LoRAWarmupAfter, with LoRAWarmup, holds the adapters back until
	// this many optimizer steps are done: the SFT steps before them train
	// every weight (the base the adapters then adapt). 0: from the first.
	LoRAWarmupAfter int
}

// DefaultConfig is GRPO with DAPO's clip-higher (0.2/0.28), token-mean
// aggregation, AdamW (0.9, 0.999, 1e-8, wd 0), lr 1e-5, clipping at 1.0.
func DefaultConfig() Config {
	loss := rl.DAPOConfig()
	loss.DualClip = 0
	return Config{
		Algorithm: GRPO,
		LR:        1e-5, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8,
		MaxGradNorm:    1,
		Loss:           loss,
		MaxResponseLen: 1024,
		MicroBatchSeqs: 32,
		MiniBatches:    1,
		Gamma:          1, Lambda: 0.95,
		VFCoef: 0.5, ValueClip: 0.2,
		RWBeta:    1,
		ZeROStage: 1,
	}
}

// Validate reports the first field that makes no learner.
func (c Config) Validate() error {
	known := false
	for _, a := range Algorithms {
		known = known || c.Algorithm == a
	}
	bad := func(field string, v any, want string) error {
		return fmt.Errorf("learner config: %s %v: %s", field, v, want)
	}
	switch {
	case !known:
		return bad("algorithm", fmt.Sprintf("%q", c.Algorithm), "want one of "+strings.Join(Algorithms, ", "))
	case c.ModelDir == "" && c.Model == nil:
		return fmt.Errorf("learner config: neither model_dir nor model is set")
	case c.ModelDir != "" && c.Model != nil:
		return fmt.Errorf("learner config: both model_dir and model are set")
	case !(c.LR > 0) || math.IsInf(c.LR, 0):
		return bad("lr", c.LR, "want a finite rate > 0")
	case !(c.MinLR >= 0) || c.MinLR > c.LR:
		return bad("min_lr", c.MinLR, "want a rate in [0, lr]")
	case c.WarmupSteps < 0:
		return bad("warmup_steps", c.WarmupSteps, "want ≥ 0")
	case c.TotalSteps != 0 && c.TotalSteps < c.WarmupSteps:
		return bad("total_steps", c.TotalSteps, "want 0 (constant) or ≥ warmup_steps")
	case !(c.Beta1 >= 0 && c.Beta1 < 1):
		return bad("beta1", c.Beta1, "want [0, 1)")
	case !(c.Beta2 >= 0 && c.Beta2 < 1):
		return bad("beta2", c.Beta2, "want [0, 1)")
	case !(c.Eps > 0):
		return bad("eps", c.Eps, "want > 0")
	case !(c.WeightDecay >= 0):
		return bad("weight_decay", c.WeightDecay, "want ≥ 0")
	case !(c.MaxGradNorm >= 0):
		return bad("max_grad_norm", c.MaxGradNorm, "want ≥ 0 (0 turns clipping off)")
	case c.MicroBatchSeqs <= 0:
		return bad("micro_batch_seqs", c.MicroBatchSeqs, "want > 0")
	case c.MiniBatches <= 0:
		return bad("mini_batches", c.MiniBatches, "want > 0")
	case c.Epochs < 0:
		return bad("epochs", c.Epochs, "want ≥ 0 (0 and 1 are one pass)")
	case c.Algorithm == DrGRPO && c.MaxResponseLen <= 0:
		return bad("max_response_len", c.MaxResponseLen, "Dr.GRPO needs it > 0 as its normalizer")
	case !(c.Gamma >= 0 && c.Gamma <= 1):
		return bad("gamma", c.Gamma, "want [0, 1]")
	case !(c.Lambda >= 0 && c.Lambda <= 1):
		return bad("lambda", c.Lambda, "want [0, 1]")
	case c.Algorithm == PPO && !(c.VFCoef > 0):
		return bad("vf_coef", c.VFCoef, "PPO needs it > 0")
	case !(c.ValueClip >= 0):
		return bad("value_clip", c.ValueClip, "want ≥ 0 (0 turns it off)")
	case c.RWFilter && (math.IsNaN(c.RWThreshold) || math.IsInf(c.RWThreshold, 0)):
		return bad("rw_threshold", c.RWThreshold, "want a finite number")
	case c.Algorithm == RWSFT && !c.RWFilter && !(c.RWBeta > 0):
		return bad("rw_beta", c.RWBeta, "want > 0")
	case c.Shards < 0:
		return bad("shards", c.Shards, "want ≥ 0 (0 and 1 mean one learner)")
	case c.KLInReward && c.Algorithm != PPO && c.Algorithm != SFT:
		return bad("kl_in_reward", true, fmt.Sprintf("only PPO takes a per-token reward (its GAE); algorithm is %q", c.Algorithm))
	case c.KLInReward && !(c.Loss.KLCoef > 0):
		return bad("kl_in_reward", true, "needs loss.kl_coef > 0 (the penalty's weight)")
	case c.RefModelDir != "" && !(c.Loss.KLCoef > 0):
		return bad("ref_model_dir", fmt.Sprintf("%q", c.RefModelDir), "a reference model needs loss.kl_coef > 0 (nothing else uses it)")
	case c.ValueBaseline != nil && (c.Algorithm == PPO || c.Algorithm == RWSFT):
		return bad("value_baseline", "set", fmt.Sprintf("goes with a policy-gradient algorithm other than ppo (algorithm is %q)", c.Algorithm))
	case c.ZeROStage != 0 && c.ZeROStage != 1:
		return bad("zero_stage", c.ZeROStage, "want 0 (replicated optimizer) or 1 (sharded optimizer state); parameter sharding (ZeRO-3) is not supported")
	}
	if c.ValueBaseline != nil {
		if err := c.ValueBaseline.validate(); err != nil {
			return fmt.Errorf("learner config: value_baseline: %w", err)
		}
	}
	if c.LoRA != nil {
		if err := c.LoRA.Validate(); err != nil {
			return fmt.Errorf("learner config: %w", err)
		}
	}
	if c.LoRAWarmupAfter < 0 || (c.LoRAWarmupAfter > 0 && (c.LoRA == nil || !c.LoRAWarmup)) {
		return bad("lora_warmup_after", c.LoRAWarmupAfter, "want 0, or > 0 with lora and lora_warmup")
	}
	if err := c.Loss.Validate(); err != nil {
		return fmt.Errorf("learner config: loss: %w", err)
	}
	if c.policyGradient() && c.Loss.ClipLow == 0 && c.Loss.ClipHigh == 0 {
		return fmt.Errorf("learner config: loss: clip_low and clip_high are both 0: the clipped surrogate needs a range (0.2/0.28 is DAPO's)")
	}
	return nil
}

// policyGradient is true for the algorithms trained with the clipped
// surrogate.
func (c Config) policyGradient() bool { return c.Algorithm != SFT && c.Algorithm != RWSFT }

// Batch is one training batch of trajectories: sequence i is Prompts[i]
// followed by Responses[i]. Per-token fields have one entry per response
// token.
type Batch struct {
	PolicyID  string
	Prompts   [][]int32
	Responses [][]int32
	// Masks are 1 for tokens the policy sampled (trained) and 0 for the
	// rest (tool output); nil means all ones.
	Masks [][]float32
	// SampleLogProbs are the engine's log probabilities at sampling time;
	// needed when Loss.TISCap > 0, else may be nil.
	SampleLogProbs [][]float32
	// Rewards are the outcome rewards, one per sequence (RL algorithms;
	// ignored by SFT).
	Rewards []float64
	// GroupIDs mark the GRPO groups: the samples of one prompt share an
	// id and sit next to each other; every group has the same size.
	// Needed by GRPO, Dr.GRPO and RLOO.
	GroupIDs []int64
	// Weights, when set, weigh plain SFT's sequences (one each, finite,
	// ≥ 0; nil: 1 each), e.g. reward weights computed by the caller; for
	// RWSFT they replace the weights computed from Rewards. Only SFT and
	// RWSFT take them.
	Weights []float64
	// Advantages, when set, are used as they are (one per response token)
	// instead of the algorithm's estimator (policy-gradient algorithms
	// other than PPO).
	Advantages [][]float32 // PGWeights and KLWeights, when set, weigh each sequence's
	// policy-gradient term and its KL term (Loss.KLCoef·w·KL) in the
	// policy loss: one finite value ≥ 0 per sequence, nil: 1 each
	// (policy-gradient algorithms; SCoRe's stage I).
	PGWeights, KLWeights []float64
	// EntropyCoef, when set, weighs this batch's entropy bonus instead of
	// Loss.EntropyCoef: a driver adapting the coefficient per step
	// (algorithm.entropy_target) sends it with each batch. Finite, in
	// [0, MaxEntropyCoef]; policy-gradient algorithms only.
	EntropyCoef *float64 `msgpack:",omitempty"`
}

// MaxEntropyCoef bounds Batch.EntropyCoef: an entropy bonus weighed above
// 1 per token outweighs any normalized advantage, so a larger value sent
// with a batch is a fault, not a setting.
const MaxEntropyCoef = 1.0

// Stats report one Train call (summed or averaged over its mini-batches).
type Stats struct {
	Step          int     // optimizer steps taken so far
	Loss          float64 // mean over mini-batches
	GradNorm      float64 // of the last mini-batch, before clipping
	LR            float64 // of the last mini-batch
	ClipFrac      float64
	ClipFracLow   float64
	ClipFracHigh  float64
	ApproxKL      float64 // k3 KL(π_old‖π)
	RefKL         float64 // to the frozen reference (when Loss.KLCoef > 0)
	Entropy       float64 // mean per-token entropy of the policy
	ValueLoss     float64 // PPO
	ValueClipFrac float64
	// ExplainedVar is PPO's 1 − Var(returns − values)/Var(returns) over
	// the batch's loss tokens, with the values of the pre-pass (before the
	// step): 1 is a perfect critic, ≤ 0 one no better than a constant.
	ExplainedVar  float64
	Tokens        int // loss tokens trained on
	Seqs          int
	RewardMean    float64
	AdvantageMean float64 // mean over loss tokens
	// KLPenalty is KLInReward's mean per-token penalty KLCoef·KL over the
	// loss tokens, subtracted from the rewards (RefKL is then that KL).
	KLPenalty float64
	// Values are ValueBaseline's values of the batch's sequences before
	// the step, in batch order (nil without one).
	Values []float64
}

// Learner holds a policy (and optional value head), its optimizer, and a
// frozen reference copy when the loss has a KL term. It is not safe for
// concurrent use: the actor serializes calls.
type Learner struct {
	cfg     Config
	model   *model.Model
	ref     *model.Model
	trainer *model.Trainer
	step    int
	shard   *Sharding
	// minLR is the configured MinLR, which SetAlgorithm caps at each
	// phase's peak rate (not at an earlier phase's).
	minLR float64
	// rlStart is the optimizer step the RL phase began at (the schedule's
	// step 0), -1 before it began; checkpoints keep it.
	rlStart int
	// partial says why the weights are no step's (TrainContext cancelled
	// between a batch's optimizer steps): Save refuses them until a Load.
	partial string
}

// Sharding makes a learner one rank of a data-parallel group; package
// learner/shard builds it. Every rank gets the whole Train batch and
// computes advantages and loss normalizers over all of it, but runs
// forward and backward only on its slice of each mini-batch: sequences
// [lo + Rank·n/Ranks, lo + (Rank+1)·n/Ranks) of a mini-batch [lo, lo+n).
// The losses are normalized by the whole mini-batch, so the sum of the
// ranks' gradients is the unsharded learner's gradient.
type Sharding struct {
	Rank, Ranks int
	// Update replaces the optimizer update (model.Trainer.Update): it sums
	// the gradients across ranks, clips by the global norm and leaves every
	// rank with the same updated weights.
	Update func(step int, params []*optim.Param, lr float64) (gradNorm float64, err error)
	// SumStats adds v element-wise across the ranks, in place, so every
	// rank reports the batch's statistics.
	SumStats func(v []float64) error
	// Abort is told when optimizer step (the learner's 1-based count) fails
	// on this rank. A failure before the step's Update began is this
	// rank's alone (a non-finite loss of its slice): the sharding then
	// tells the other ranks, waiting in the collective, so they fail at
	// once instead of at their timeout.
	Abort func(step int, err error)
	// GradsReady, optional, is model.Trainer.GradsReady: told during the
	// backward pass of each step's last micro-batch which gradients are
	// final (GradGroups' groups, in order), so reduction can overlap the
	// rest of backward. It must not block.
	GradsReady func(step int, params []*optim.Param, ready []int)
	// DeviceUpdate says Update steps on the device where the learner's
	// backend can (StepOnDevice, StepSlicesOnDevice) and reads no weights
	// from its params there (model.Trainer.DeviceUpdate): the weights are
	// then not copied to the host before the update.
	DeviceUpdate bool
	// ParamsChanged, optional, is told when the trainable parameters
	// change between steps (LoRA adapters added: lora.go), so the rank
	// lays out its buffers and optimizer state again. Every rank changes
	// alike, at the same call.
	ParamsChanged func() error
}

// SetSharding makes the learner rank s.Rank of s.Ranks (nil makes it a
// single learner again). The weights must already equal the other ranks'.
func (l *Learner) SetSharding(s *Sharding) error {
	if s == nil {
		l.shard = nil
		l.trainer.Update, l.trainer.GradsReady, l.trainer.DeviceUpdate = nil, nil, false
		return nil
	}
	if s.Ranks < 1 || s.Rank < 0 || s.Rank >= s.Ranks {
		return fmt.Errorf("learner: sharding: rank %d of %d", s.Rank, s.Ranks)
	}
	if s.Update == nil || s.SumStats == nil || s.Abort == nil {
		return fmt.Errorf("learner: sharding: rank %d of %d lacks Update, SumStats or Abort", s.Rank, s.Ranks)
	}
	l.shard = s
	l.trainer.Update, l.trainer.GradsReady, l.trainer.DeviceUpdate = s.Update, s.GradsReady, s.DeviceUpdate
	return nil
}

// GradGroups lists TrainableParams' indices in the order the backward pass
// finishes their gradients (model.Model.GradGroups): each decoder layer's,
// last layer first, then the embedding, norm and heads.
func (l *Learner) GradGroups() [][]int { return l.trainer.GradGroups() }

// StepOnDevice takes a sharded step's update on the device from the
// reduced gradients in params (model.Trainer.StepOnDevice); ok is false,
// with nothing done, where the backend has no fused AdamW.
func (l *Learner) StepOnDevice(params []*optim.Param, lr float64) (norm float64, ok bool, err error) {
	return l.trainer.StepOnDevice(params, lr)
}

// StepSlicesOnDevice takes a ZeRO-1 rank's update of its slices on the
// device with opt, the rank's optimizer (model.Trainer.StepSlicesOnDevice);
// ok is false, with nothing done, where the backend has no fused AdamW.
func (l *Learner) StepSlicesOnDevice(opt *optim.AdamW, slices []model.Slice, grads, weights [][]float32, gradScale float32, lr float64) (ok bool, err error) {
	return l.trainer.StepSlicesOnDevice(opt, slices, grads, weights, gradScale, lr)
}

// SyncSlices brings opt's moments up to date with those
// StepSlicesOnDevice keeps on the device (model.Trainer.SyncSlices).
func (l *Learner) SyncSlices(opt *optim.AdamW) error { return l.trainer.SyncSlices(opt) }

// Optimizer is the learner's AdamW. A ZeRO-1 rank takes its slice of the
// state from it after Load and then leaves it empty.
func (l *Learner) Optimizer() *optim.AdamW { return l.trainer.Opt }

// TrainableParams views the trainable tensors (weights and gradients) in
// the model's order; on the cpu backend they alias the model's memory.
func (l *Learner) TrainableParams() []*optim.Param {
	var out []*optim.Param
	hm, _ := l.model.B.(backend.HostMemory)
	for _, p := range l.model.TrainableParams() {
		op := &optim.Param{Name: p.Name}
		if hm != nil {
			op.Data, op.Grad = hm.Host(p.W), hm.Host(p.G)
		} else {
			op.Data, op.Grad = make([]float32, p.Len()), make([]float32, p.Len())
			l.model.B.Download(op.Data, p.W)
		}
		out = append(out, op)
	}
	return out
}

// New builds a learner on the cpu backend.
func New(cfg Config) (*Learner, error) { return NewContext(context.Background(), cfg) }

// NewContext is New that gives up once ctx is done (checked between the
// model's tensors while it initializes or loads them, and between the
// build's parts), returning an error that wraps ctx's: the learner actors build
// with their node's context, so a node that stops does not wait for a
// large model's init.
func NewContext(ctx context.Context, cfg Config) (*Learner, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := cfg.CheckLoRARank(); err != nil {
		return nil, err
	}
	var m *model.Model
	var b backend.Backend
	var err error
	if cfg.Backend != nil {
		if b, err = cfg.Backend(); err != nil {
			return nil, fmt.Errorf("learner: backend: %w", err)
		}
	} else if b, err = newBackend(cfg.Device); err != nil {
		return nil, err
	}
	if cfg.ModelDir != "" {
		if m, err = model.LoadContext(ctx, cfg.ModelDir, b); err != nil {
			return nil, fmt.Errorf("learner: %w", err)
		}
	} else {
		if m, err = model.New(*cfg.Model, b); err != nil {
			return nil, fmt.Errorf("learner: %w", err)
		}
		if err := m.InitRandomContext(ctx, cfg.Seed); err != nil {
			m.Release()
			return nil, fmt.Errorf("learner: %w", err)
		}
	}
	if err := ctx.Err(); err != nil {
		m.Release()
		return nil, fmt.Errorf("learner: %w", err)
	}
	if (cfg.Algorithm == PPO || cfg.ValueBaseline != nil) && m.Value == nil {
		if err := m.AddValueHead(cfg.Seed + 1); err != nil {
			return nil, fmt.Errorf("learner: %w", err)
		}
	}
	if cfg.ValueBaseline != nil {
		m.Value.DetachTrunk = cfg.ValueBaseline.StopTrunkGradient
	}
	m.CheckpointActivations, m.ActivationsBF16 = cfg.CheckpointActivations, cfg.ActivationsBF16
	l := &Learner{cfg: cfg, model: m, minLR: cfg.MinLR, rlStart: -1}
	switch {
	case cfg.RefModelDir != "":
		if l.ref, err = loadReference(ctx, cfg, m); err != nil {
			return nil, err
		}
	case cfg.Loss.KLCoef > 0:
		if l.ref, err = m.Clone(); err != nil {
			return nil, fmt.Errorf("learner: reference policy: %w", err)
		}
	}
	l.trainer = &model.Trainer{Model: m, Opt: optim.NewAdamW(cfg.Beta1, cfg.Beta2, cfg.Eps, cfg.WeightDecay), MaxGradNorm: cfg.MaxGradNorm}
	return l, nil
}

// Config returns the learner's configuration.
func (l *Learner) Config() Config { return l.cfg }

// Model is the trained policy. Callers must not train it behind the
// learner's back.
func (l *Learner) Model() *model.Model { return l.model }

// Close releases the device the learner's backend holds (a GPU's memory,
// kernels and cuBLASLt; nothing on the CPU backend). The learner must not
// be used after. The learner actors close theirs when they stop, so a
// node that hosts run after run, or restarts a failed learner, gets the
// GPU's memory back.
func (l *Learner) Close() error {
	if c, ok := l.model.B.(io.Closer); ok {
		return c.Close()
	}
	return nil
}

// Step is the number of optimizer steps taken.
func (l *Learner) Step() int { return l.step }

// SetAlgorithm switches the algorithm between Train calls (SFT warm-up,
// then GRPO) and, when lr > 0, the peak learning rate (the configured
// MinLR is capped at it). SFT trains at that rate, constant; the RL
// schedule starts at the first Train with another algorithm (Config.LR).
// The new configuration must validate; PPO needs a value head that the
// model already has.
func (l *Learner) SetAlgorithm(name string, lr float64) error {
	c := l.cfg
	c.Algorithm = name
	if lr > 0 {
		c.LR = lr
		c.MinLR = min(l.minLR, lr)
	}
	if err := c.Validate(); err != nil {
		return err
	}
	if name == PPO && l.model.Value == nil {
		return fmt.Errorf("learner: algorithm %q needs a value head; build the learner with it", name)
	}
	l.cfg = c
	return nil
}

// lr is the rate of optimizer step s (0-based, counted from the first
// step): SFT's constant rate, or the RL schedule's at s−rlStart.
func (l *Learner) lr(s int) float64 {
	c := l.cfg
	if c.Algorithm == SFT || l.rlStart < 0 {
		return c.LR
	}
	s -= l.rlStart
	if c.TotalSteps == 0 {
		if s < c.WarmupSteps {
			return c.LR * float64(s+1) / float64(c.WarmupSteps)
		}
		return c.LR
	}
	return optim.WarmupCosine{Base: c.LR, Min: c.MinLR, Warmup: c.WarmupSteps, Total: c.TotalSteps}.LR(s)
}

// RLStart is the optimizer step the RL phase (the LR schedule) began at,
// or -1 before its first Train.
func (l *Learner) RLStart() int { return l.rlStart }

// startRL marks the RL phase's first step at the first Train with an
// algorithm other than SFT. After an SFT warm-up, the KL reference (the
// initial policy's copy, not a given one) becomes the warmed-up policy:
// RL's initial policy, as the reference is the SFT model in
// InstructGPT-style training (under LoRA, startLoRA made it the base).
func (l *Learner) startRL() error {
	if l.cfg.Algorithm == SFT || l.rlStart >= 0 {
		return nil
	}
	l.rlStart = l.step
	if vb := l.cfg.ValueBaseline; vb != nil && vb.ValueOnly && l.step > 0 {
		// The warm-up's AdamW moments would keep moving the policy's
		// weights on zero gradients.
		if err := l.restartOptimizer(); err != nil {
			return fmt.Errorf("learner: start RL: %w", err)
		}
	}
	if l.ref != nil && l.cfg.RefModelDir == "" && l.step > 0 && l.model.LoRA() == nil {
		ref, err := l.model.Clone()
		if err != nil {
			return fmt.Errorf("learner: start RL: reference policy: %w", err)
		}
		l.ref = ref
	}
	return nil
}

// PolicyWeights returns a host copy of the policy's weights by Hugging
// Face name, without the value head: what an inference engine serves
// (under LoRA, the base with the adapters merged in).
func (l *Learner) PolicyWeights() map[string][]float32 {
	w, _ := l.policyWeights(context.Background())
	return w
}

// policyWeights is PolicyWeights that gives up once ctx is done.
func (l *Learner) policyWeights(ctx context.Context) (map[string][]float32, error) {
	return served(l.model.MergedWeightsContext(ctx))
}

// served is what an engine serves of a host copy of weights: w without
// the value head's tensors (err passes through).
func served(w map[string][]float32, err error) (map[string][]float32, error) {
	if err != nil {
		return nil, err
	}
	delete(w, model.ValueHeadWeight)
	delete(w, model.ValueHeadBias)
	return w, nil
}

// CheckDevice reports why a learner on device ("", "cpu", "cuda",
// "cuda-bf16", either cuda value with a device index: "cuda:1") cannot
// run on this host (cuda.CheckBackend); nil when it can.
func CheckDevice(device string) error { return cuda.CheckBackend(device) }

// newBackend is the backend Config.Device names.
func newBackend(device string) (backend.Backend, error) {
	b, err := cuda.OpenBackend(device)
	if err != nil {
		return nil, fmt.Errorf("learner: %w", err)
	}
	return b, nil
}
