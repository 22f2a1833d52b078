package train

// Generation on vLLM servers (Config.VLLM, and Config.FeedbackVLLM for
// MLMT's feedback policy): a policy's server is a weightsync.VLLMServer in
// the driver's process, and each learner step's weights reach its servers
// as a checkpoint the learner writes into a directory they read
// (learnerSource.WriteModel), then reloaded.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/rlnode/rlnode/learner/model"
	"github.com/rlnode/rlnode/learner/safetensors"
	"github.com/rlnode/rlnode/rollout/vllm"
	"github.com/rlnode/rlnode/weightsync"
)

// VLLM makes the solver generate on running vLLM OpenAI-compatible
// servers instead of the native engine.
//
// The driver talks to them through one rollout/vllm client in its own
// process (no rollout actors: the servers do the work, and the client
// already spreads requests over them, bounds and retries them, and moves
// a failed request to another server). Prompts are token ids from the
// policy's own tokenizer and the servers answer token ids
// (return_token_ids), so the learner trains on exactly the ids the servers
// sampled; the servers must serve a model with the same tokenizer.
//
// Weights: after every learner step (and at start) the learner writes its
// checkpoint into Dir/step-N/, the driver keeps of it what vLLM loads
// (config.json, model safetensors) and adds the tokenizer, and every
// server reloads it as version N (the run's step) by its route
// (WeightUpdate: vLLM's "disk" weight transfer, or collective_rpc
// reload_weights on a stock vLLM; inside pause and resume). The
// next generation starts only when every server serves N; with
// Config.MaxStaleness k > 0 the next step's generation runs while a step
// trains, the reload waits for the requests in flight (which keep the
// version they were sent under) and holds new ones until it is done, and
// every result must be of version N-k or newer.
type VLLM struct {
	// Servers are the servers' base URLs (no /v1); at least one.
	Servers []string
	// Model is the served model name.
	Model string
	// APIKey is the servers' --api-key; empty sends none.
	APIKey string
	// MaxInFlight bounds the requests outstanding per server (default 64).
	MaxInFlight int
	// Dir is a directory the learner writes (from the driver's host when
	// the learner does not see the run folder: learner.Folders) and every
	// server reads under the same path (a shared file system) or, for a
	// launched server whose node does not see the run folder, from a copy
	// fetched onto its node; default Out/vllm-weights.
	// Made absolute.
	Dir string
	// Keep is how many step directories stay in Dir (default 2).
	Keep int
	// ReloadTimeout bounds one reload at every server: a server that does
	// not confirm within it stops the step (default 10 min). It starts once
	// the weights are on every server's node.
	ReloadTimeout time.Duration
	// StageTimeout bounds copying the weights onto the nodes of launched
	// servers that do not see the run folder, before ReloadTimeout starts
	// (default weightsync.DefaultStageTimeout, 1 h).
	StageTimeout time.Duration
	// RequestTimeout bounds one try of one generation request (default
	// the client's, 10 min).
	RequestTimeout time.Duration
	// WeightUpdate is how the servers reload a checkpoint: "auto" (the
	// default: each server is asked once), "disk" or "reload_weights"
	// (vllm.WeightUpdate).
	WeightUpdate string
	// Launch, instead of Servers, has the run start its servers as
	// actors on the cluster's nodes that launch them (vllm.LaunchServers:
	// the run's own node, or nodes started with --vllm), each serving
	// Launch.Model, and stop them when it ends.
	Launch *vllm.Launch
}

func (v *VLLM) validate(field string) error {
	switch {
	case len(v.Servers) == 0 && v.Launch == nil:
		return fmt.Errorf("train config: %s.Servers is empty: give at least one vLLM server URL, or Launch", field)
	case len(v.Servers) > 0 && v.Launch != nil:
		return fmt.Errorf("train config: %s: Servers and Launch are both set: the run uses running servers or starts its own, not both", field)
	case v.Launch != nil && (v.Launch.Servers < 1 || v.Launch.Model == ""):
		return fmt.Errorf("train config: %s.Launch: %d servers of model %q: want at least one, and a model folder", field, v.Launch.Servers, v.Launch.Model)
	case v.Model == "":
		return fmt.Errorf("train config: %s.Model is empty: name the served model", field)
	case v.MaxInFlight < 0 || v.Keep < 0 || v.ReloadTimeout < 0 || v.StageTimeout < 0 || v.RequestTimeout < 0:
		return fmt.Errorf("train config: %s: negative MaxInFlight %d, Keep %d, ReloadTimeout %v, StageTimeout %v or RequestTimeout %v",
			field, v.MaxInFlight, v.Keep, v.ReloadTimeout, v.StageTimeout, v.RequestTimeout)
	}
	switch vllm.WeightUpdate(v.WeightUpdate) {
	case "", vllm.WeightUpdateAuto, vllm.WeightUpdateDisk, vllm.WeightUpdateReloadWeights:
	default:
		return fmt.Errorf("train config: %s.WeightUpdate %q: want %q, %q or %q", field, v.WeightUpdate,
			vllm.WeightUpdateAuto, vllm.WeightUpdateDisk, vllm.WeightUpdateReloadWeights)
	}
	return nil
}

// launchesVLLM reports whether the run starts vLLM servers of its own.
func (c *Config) launchesVLLM() bool {
	return (c.VLLM != nil && c.VLLM.Launch != nil) || (c.FeedbackVLLM != nil && c.FeedbackVLLM.Launch != nil)
}

// validateVLLM checks VLLM and FeedbackVLLM against the rest of c.
func (c *Config) validateVLLM() error {
	switch {
	case c.VLLM == nil:
		return errors.New("train config: FeedbackVLLM without VLLM: the feedback policy runs on vLLM servers only when the solver does")
	case c.Rollout != nil:
		return errors.New("train config: VLLM and Rollout are both set: the solver generates on vLLM servers or on rollout actors, not both")
	case c.Feedback != nil && c.FeedbackVLLM == nil:
		return errors.New("train config: VLLM with a feedback policy but no FeedbackVLLM: the feedback policy needs vLLM servers of its own (its weights differ from the solver's)")
	case c.FeedbackVLLM != nil && c.Feedback == nil:
		return errors.New("train config: FeedbackVLLM set, but the run has no feedback policy")
	case c.FeedbackVLLM != nil && c.FeedbackRollout != nil:
		return errors.New("train config: FeedbackVLLM and FeedbackRollout are both set: the feedback policy generates on vLLM servers or on rollout actors, not both")
	}
	if err := c.VLLM.validate("VLLM"); err != nil {
		return err
	}
	if c.FeedbackVLLM == nil {
		return nil
	}
	if err := c.FeedbackVLLM.validate("FeedbackVLLM"); err != nil {
		return err
	}
	for _, u := range c.FeedbackVLLM.Servers {
		if slices.Contains(c.VLLM.Servers, u) {
			return fmt.Errorf("train config: FeedbackVLLM.Servers: %s also serves the solver (VLLM.Servers): a server holds one policy's weights", u)
		}
	}
	if c.VLLM.Dir != "" && c.VLLM.Dir == c.FeedbackVLLM.Dir {
		return fmt.Errorf("train config: FeedbackVLLM.Dir %s is VLLM.Dir too: each policy's checkpoints need their own directory", c.VLLM.Dir)
	}
	return nil
}

// vllmConfig is the vLLM setup of p: Config.VLLM for the solver,
// Config.FeedbackVLLM for the feedback policy; nil when p is not on vLLM.
func (r *run) vllmConfig(p *policy) *VLLM {
	if p.id == "feedback" {
		return r.cfg.FeedbackVLLM
	}
	return r.cfg.VLLM
}

// vllmDir is the absolute directory p's checkpoints go to: its Dir, or
// Out/vllm-weights (the solver) and Out/vllm-weights-feedback.
func (r *run) vllmDir(p *policy) (string, error) {
	dir := r.vllmConfig(p).Dir
	if dir == "" {
		dir = filepath.Join(r.cfg.Out, "vllm-weights")
		if p.id == "feedback" {
			dir += "-feedback"
		}
	}
	return filepath.Abs(dir)
}

// startVLLM connects p to its vLLM servers behind a
// weightsync.VLLMServer. The servers' weights count as no version until
// the first publish reloads the learner's.
func (r *run) startVLLM(ctx context.Context, p *policy) error {
	v := r.vllmConfig(p)
	tok, err := policyTokenizer(p.l)
	if err != nil {
		return err
	}
	dir, err := r.vllmDir(p)
	if err != nil {
		return fmt.Errorf("vLLM weights directory: %w", err)
	}
	// The servers serve the policy's model (same config.json): a token id
	// outside its vocabulary is a broken answer, refused with the
	// server's name rather than at the learner.
	mc := p.l.Model
	if p.l.ModelDir != "" {
		if mc, err = model.ReadConfig(filepath.Join(p.l.ModelDir, "config.json")); err != nil {
			return err
		}
	}
	vocab := 0
	if mc != nil {
		vocab = mc.VocabSize
	}
	servers, key := v.Servers, v.APIKey
	var written func(string)
	var locate func(context.Context, int) (vllm.Location, error)
	var stage func(context.Context, int, string) (string, error)
	if v.Launch != nil {
		// Launched once per run: a learner restart that starts the engine
		// anew keeps the servers (a vLLM start takes minutes).
		if p.launched == nil {
			l := *v.Launch
			l.ServedName = v.Model
			// A server whose node does not see the run folder fetches the
			// model and each weights folder from this host.
			l.Folders = r.learnerFolders()
			l.Folders.Probe = r.vllmProbe // kept for the run, not only while learners are placed
			r.folders.Allow(l.Model)
			r.folders.AllowUnder(dir)
			prefix := fmt.Sprintf("vllm-%s-%d", p.id, time.Now().UnixNano())
			start := time.Now()
			if p.launched, err = vllm.LaunchServers(ctx, r.node, prefix, l); err != nil {
				return fmt.Errorf("launch vLLM servers: %w", err)
			}
			r.log.Info("vLLM servers started", "policy", p.id, "servers", strings.Join(p.launched.URLs, " "), "gpus_each", l.GPUs,
				"took", time.Since(start).Round(time.Millisecond))
		}
		servers, key = p.launched.URLs, p.launched.APIKey
		locate, stage, written = p.launched.Locate, p.launched.Stage, r.folders.Changed
	}
	srv, err := weightsync.StartVLLM(ctx, weightsync.VLLMConfig{Policy: p.id,
		Client: vllm.Config{Servers: servers, Model: v.Model, APIKey: key, MaxInFlight: v.MaxInFlight,
			RequestTimeout: v.RequestTimeout, ControlTimeout: v.ReloadTimeout, VocabSize: vocab,
			WeightUpdate: vllm.WeightUpdate(v.WeightUpdate), Locate: locate, Stage: stage},
		Dir: dir, Keep: v.Keep, Written: written, ReloadTimeout: v.ReloadTimeout, StageTimeout: v.StageTimeout, LoRAName: VLLMLoRAName, MaxStaleness: r.cfg.MaxStaleness, Logger: r.log})
	if err != nil {
		// The run ends with this error: its servers go now, not when the
		// owner's node is reaped.
		p.launched.Stop(context.WithoutCancel(ctx))
		p.launched = nil
		return err
	}
	p.server, p.tok = srv, tok
	return nil
}

// modelOnly leaves in a learner checkpoint directory what a vLLM server
// loads: config.json and the model's safetensors (model.safetensors, or
// model-*-of-*.safetensors shards and their index), without a value head.
// vLLM reads every *.safetensors file of a directory without an index, so
// the learner's optimizer, reference, value-head and state files must go.
func modelOnly(ctx context.Context, dir string) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	var hasModel bool
	for _, e := range ents {
		name := e.Name()
		switch {
		case name == "config.json" || name == "model.safetensors.index.json":
		case strings.HasPrefix(name, "model") && strings.HasSuffix(name, ".safetensors"):
			hasModel = true
		default:
			if err := os.RemoveAll(filepath.Join(dir, name)); err != nil {
				return err
			}
		}
	}
	if !hasModel {
		return fmt.Errorf("%s holds no model*.safetensors", dir)
	}
	return stripValueHead(ctx, dir)
}

// stripValueHead rewrites the model in dir without a PPO value head
// (v_head.*: vLLM's model classes have no such parameter and refuse
// unknown weights); a model without one is left alone. It reads and
// rewrites the whole model, so it checks ctx between tensors (a stop
// during a vLLM weight push must not wait for it) and gives up, with an
// error wrapping ctx's, once it is done.
func stripValueHead(ctx context.Context, dir string) error {
	ck, err := safetensors.OpenCheckpointContext(ctx, dir)
	if err != nil {
		return err
	}
	var keep []safetensors.Tensor
	stripped := false
	for _, name := range ck.Names() {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("%s: rewrite without the value head: %w", dir, err)
		}
		if strings.HasPrefix(name, "v_head.") {
			stripped = true
			continue
		}
		t, _, ok := ck.Tensor(name)
		if !ok {
			return fmt.Errorf("%s: tensor %q listed but not found", dir, name)
		}
		keep = append(keep, *t)
	}
	if !stripped {
		return nil
	}
	if err := safetensors.WriteCheckpointContext(ctx, dir, keep, 0); err != nil {
		return fmt.Errorf("%s: rewrite without the value head: %w", dir, err)
	}
	return nil
}
