package driver

// Generation on vLLM servers (Config.VLLM): the solver's engine is a
// rollout/vllm client in the driver's process, and each learner step's
// weights reach the servers as a checkpoint the learner writes into a
// directory they read, then reloaded.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/rlnode/rlnode/learner/safetensors"
	"github.com/rlnode/rlnode/rollout/vllm"
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
// server reloads it as version N (the run's step) (vLLM's "disk"
// weight transfer: pause, start, update {"path"}, finish, resume). The
// next generation starts only when every server serves N.
type VLLM struct {
	// Servers are the servers' base URLs (no /v1); at least one.
	Servers []string
	// Model is the served model name.
	Model string
	// APIKey is the servers' --api-key; empty sends none.
	APIKey string
	// MaxInFlight bounds the requests outstanding per server (default 64).
	MaxInFlight int
	// Dir is a directory the learner writes and every server reads under
	// the same path (a shared file system); default Out/vllm-weights.
	// Made absolute.
	Dir string
	// Keep is how many step directories stay in Dir (default 2).
	Keep int
	// ReloadTimeout bounds one reload at every server: a server that does
	// not confirm within it stops the step (default 10 min).
	ReloadTimeout time.Duration
	// RequestTimeout bounds one try of one generation request (default
	// the client's, 10 min).
	RequestTimeout time.Duration
}

func (v *VLLM) validate(c *Config) error {
	switch {
	case len(v.Servers) == 0:
		return errors.New("driver config: VLLM.Servers is empty: give at least one vLLM server URL")
	case v.Model == "":
		return errors.New("driver config: VLLM.Model is empty: name the served model")
	case c.Rollout != nil:
		return errors.New("driver config: VLLM and Rollout are both set: the solver generates on vLLM servers or on rollout actors, not both")
	case c.MaxStaleness > 0:
		return errors.New("driver config: VLLM with MaxStaleness > 0: vLLM engines run synchronous training only")
	case c.Feedback != nil:
		return errors.New("driver config: VLLM with a feedback policy: vLLM serves the solver only (use static feedback or native engines)")
	case v.MaxInFlight < 0 || v.Keep < 0 || v.ReloadTimeout < 0 || v.RequestTimeout < 0:
		return fmt.Errorf("driver config: VLLM: negative MaxInFlight %d, Keep %d, ReloadTimeout %v or RequestTimeout %v",
			v.MaxInFlight, v.Keep, v.ReloadTimeout, v.RequestTimeout)
	}
	return nil
}

// vllmDir is the absolute directory the solver's checkpoints go to.
func (r *run) vllmDir() (string, error) {
	dir := r.cfg.VLLM.Dir
	if dir == "" {
		dir = filepath.Join(r.cfg.Out, "vllm-weights")
	}
	return filepath.Abs(dir)
}

// startVLLM connects p (the solver) to the vLLM servers: the client checks
// every server answers and serves the model (an unreachable one is named
// by URL). The servers' weights count as no version until the first sync
// reloads the learner's.
func (r *run) startVLLM(ctx context.Context, p *policy) error {
	v := r.cfg.VLLM
	tok, err := policyTokenizer(p.l)
	if err != nil {
		return fmt.Errorf("driver: %s policy: %w", p.id, err)
	}
	c, err := vllm.New(ctx, vllm.Config{Servers: v.Servers, Model: v.Model, APIKey: v.APIKey, MaxInFlight: v.MaxInFlight,
		RequestTimeout: v.RequestTimeout, ControlTimeout: v.ReloadTimeout, WeightVersion: -1})
	if err != nil {
		return fmt.Errorf("driver: %s policy on vLLM: %w", p.id, err)
	}
	p.vllm, p.tok, p.eng = c, tok, &policyEngine{Engine: c, tok: tok}
	r.log.Info("vllm engine", "policy", p.id, "servers", strings.Join(v.Servers, ","), "model", v.Model)
	return nil
}

// syncVLLM writes p's learner checkpoint into the shared directory and
// makes every server reload it (or, once a LoRA learner has adapters,
// load them: lora.go); it returns once every server serves the learner's
// step as its version.
func (r *run) syncVLLM(ctx context.Context, p *policy) error {
	root, err := r.vllmDir()
	if err != nil {
		return fmt.Errorf("driver: vLLM weights directory: %w", err)
	}
	// Versions are the run's steps (as the native engines'); the learner's
	// own step is in the error messages.
	version := int64(r.step)
	loaded := false
	if p.l.LoRA != nil {
		if loaded, err = r.syncVLLMAdapter(ctx, p); err != nil {
			return err
		}
	}
	if !loaded {
		if err := r.reloadVLLM(ctx, p, root, "step-"+strconv.FormatInt(version, 10)); err != nil {
			return err
		}
		// Adapters not started yet: these weights are the base they will
		// start on.
		p.vllmBase = true
	}
	if err := r.checkServed(p, version); err != nil {
		return err
	}
	r.pruneVLLM(root, version)
	if p == r.solver {
		r.version = version
		if r.cfg.OnWeights != nil {
			r.cfg.OnWeights(r.version, p.eng.Engine)
		}
	}
	return nil
}

func (r *run) vllmReloadTimeout() time.Duration {
	if t := r.cfg.VLLM.ReloadTimeout; t > 0 {
		return t
	}
	return 10 * time.Minute
}

// reloadVLLM writes p's learner checkpoint, stripped to what vLLM loads,
// into root/name and makes every server reload it as the run's step.
func (r *run) reloadVLLM(ctx context.Context, p *policy, root, name string) error {
	tmp := filepath.Join(root, fmt.Sprintf("writing-%d", time.Now().UnixNano()))
	saved, err := p.learner.save(ctx, tmp)
	if err != nil {
		_ = os.RemoveAll(tmp)
		return fmt.Errorf("driver: write the %s checkpoint for vLLM to %s: %w", p.id, tmp, err)
	}
	version := int64(r.step)
	dir := filepath.Join(root, name)
	if err := modelOnly(tmp); err != nil {
		_ = os.RemoveAll(tmp)
		return fmt.Errorf("driver: %s checkpoint of learner step %d for vLLM: %w", p.id, saved.Step, err)
	}
	if err := p.tok.Save(filepath.Join(tmp, "tokenizer.json")); err != nil {
		_ = os.RemoveAll(tmp)
		return fmt.Errorf("driver: write the %s checkpoint for vLLM: %w", p.id, err)
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("driver: vLLM weights: %w", err)
	}
	if err := os.Rename(tmp, dir); err != nil {
		_ = os.RemoveAll(tmp)
		return fmt.Errorf("driver: vLLM weights: %w", err)
	}
	timeout := r.vllmReloadTimeout()
	rctx, cancel := context.WithTimeout(ctx, timeout)
	err = p.vllm.ReloadWeights(rctx, dir, version)
	timedOut := rctx.Err() != nil && ctx.Err() == nil
	cancel()
	switch {
	case err != nil && timedOut:
		return fmt.Errorf("driver: %s step %d: the vLLM servers did not confirm the reload within %v: %w", p.id, version, timeout, err)
	case err != nil:
		return fmt.Errorf("driver: %s step %d: %w", p.id, version, err)
	}
	return nil
}

// modelOnly leaves in a learner checkpoint directory what a vLLM server
// loads: config.json and the model's safetensors (model.safetensors, or
// model-*-of-*.safetensors shards and their index), without a value head.
// vLLM reads every *.safetensors file of a directory without an index, so
// the learner's optimizer, reference, value-head and state files must go.
func modelOnly(dir string) error {
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
	return stripValueHead(dir)
}

// stripValueHead rewrites the model in dir without a PPO value head
// (v_head.*: vLLM's model classes have no such parameter and refuse
// unknown weights); a model without one is left alone.
func stripValueHead(dir string) error {
	ck, err := safetensors.OpenCheckpoint(dir)
	if err != nil {
		return err
	}
	var keep []safetensors.Tensor
	stripped := false
	for _, name := range ck.Names() {
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
	if err := safetensors.WriteCheckpoint(dir, keep, 0); err != nil {
		return fmt.Errorf("%s: rewrite without the value head: %w", dir, err)
	}
	return nil
}

// checkServed fails unless every server of p serves version.
func (r *run) checkServed(p *policy, version int64) error {
	var wrong []string
	for _, st := range p.vllm.Servers() {
		if st.WeightVersion != version {
			wrong = append(wrong, fmt.Sprintf("%s serves version %d", st.URL, st.WeightVersion))
		}
	}
	if len(wrong) > 0 {
		return fmt.Errorf("driver: %s: vLLM servers not on version %d: %s", p.id, version, strings.Join(wrong, "; "))
	}
	return nil
}

// pruneVLLM deletes the step directories older than the Keep newest.
func (r *run) pruneVLLM(root string, current int64) {
	keep := int64(r.cfg.VLLM.Keep)
	if keep <= 0 {
		keep = 2
	}
	ents, err := os.ReadDir(root)
	if err != nil {
		return
	}
	for _, e := range ents {
		num, ok := strings.CutPrefix(e.Name(), "step-")
		if !ok || !e.IsDir() {
			continue
		}
		if n, err := strconv.ParseInt(num, 10, 64); err == nil && n <= current-keep {
			if err := os.RemoveAll(filepath.Join(root, e.Name())); err != nil {
				r.log.Warn("vllm weights: prune", "dir", e.Name(), "err", err)
			}
		}
	}
}
