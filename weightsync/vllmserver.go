package weightsync

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/rlnode/rlnode/learner/safetensors"
	"github.com/rlnode/rlnode/rollout/engine"
	"github.com/rlnode/rlnode/rollout/vllm"
	"github.com/rlnode/rlnode/rollout/weights"
)

// VLLMConfig says which vLLM servers a VLLMServer drives and where their
// weights go.
type VLLMConfig struct {
	// Policy names the policy in logs.
	Policy string
	// Client is the rollout/vllm client's configuration (its
	// WeightVersion is set to -1: no version until the first Publish).
	// Its ControlTimeout should be ReloadTimeout's.
	Client vllm.Config
	// Dir is an absolute directory every server reads under the same path,
	// or from a copy on its node (vllm.Config.Stage); Keep is how many step
	// directories stay there (default 2).
	Dir  string
	Keep int
	// Written, when set, is told of each folder of Dir once written anew
	// (before any server loads it): a folder server that offers Dir to
	// servers that copy it forgets what it knew of the folder's files.
	Written func(dir string)
	// ReloadTimeout bounds one reload or adapter load at every server
	// (default 10 min), once the folder is on their nodes.
	ReloadTimeout time.Duration
	// StageTimeout bounds copying a folder onto the nodes of servers that
	// do not see Dir (vllm.Config.Stage), before the reload's bound
	// starts (default DefaultStageTimeout): a copy's time grows with the
	// model and the link to this host, a reload's does not. Each chunk of
	// a copy is bounded on its own too (it must keep arriving).
	StageTimeout time.Duration
	// LoRAName is the name adapters are loaded under, which requests then
	// use as their model.
	LoRAName string
	// MaxStaleness is k: GenerateFor(onPolicy) refuses results older than
	// onPolicy-k.
	MaxStaleness int
	Logger       *slog.Logger // default discards
}

// DefaultStageTimeout is VLLMConfig.StageTimeout's default: a 16 GB
// model copied at 5 MB/s.
const DefaultStageTimeout = time.Hour

// VLLMServer is a PolicyServer over vLLM servers through one rollout/vllm
// client. A full version is the learner's model written to Dir/step-N/
// and reloaded by every server (by its route, vllm.Config.WeightUpdate:
// vLLM's "disk" weight transfer or collective_rpc reload_weights); a LoRA
// learner's adapters are written to Dir/step-N/ as a PEFT adapter and
// loaded in place, after the base (Dir/base-N/) when the servers may not
// hold it (at start).
type VLLMServer struct {
	cfg    VLLMConfig
	log    *slog.Logger
	client *vllm.Client
	base   bool                         // the servers hold the base adapters merge onto
	routes map[string]vllm.WeightUpdate // each server's reload route, as last logged
	where  []string                     // each server's URL, or why it was not found, as last logged
}

// StartVLLM connects to the servers: the client checks every server
// answers and serves the model (an unreachable one is named by URL).
func StartVLLM(ctx context.Context, cfg VLLMConfig) (*VLLMServer, error) {
	if !filepath.IsAbs(cfg.Dir) {
		return nil, fmt.Errorf("vLLM: weights directory %q is not absolute", cfg.Dir)
	}
	if cfg.Keep <= 0 {
		cfg.Keep = 2
	}
	if cfg.ReloadTimeout <= 0 {
		cfg.ReloadTimeout = 10 * time.Minute
	}
	if cfg.StageTimeout <= 0 {
		cfg.StageTimeout = DefaultStageTimeout
	}
	cc := cfg.Client
	cc.WeightVersion = -1
	c, err := vllm.New(ctx, cc)
	if err != nil {
		return nil, fmt.Errorf("vLLM: %w", err)
	}
	s := &VLLMServer{cfg: cfg, log: cfg.Logger, client: c}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	s.log.Info("vllm engine", "policy", cfg.Policy, "servers", strings.Join(cc.Servers, ","), "model", cc.Model)
	return s, nil
}

// Generate implements engine.Engine.
func (s *VLLMServer) Generate(ctx context.Context, reqs []engine.Request) ([]engine.Result, error) {
	return s.client.Generate(ctx, reqs)
}

// GenerateFor checks that every server serves a version in
// [onPolicy-k, onPolicy], generates, and refuses results older than
// onPolicy-k.
func (s *VLLMServer) GenerateFor(ctx context.Context, onPolicy int64, reqs []engine.Request) ([]engine.Result, error) {
	bound := onPolicy - int64(s.cfg.MaxStaleness)
	if err := s.checkServing(bound, onPolicy); err != nil {
		return nil, err
	}
	res, err := s.client.Generate(ctx, reqs)
	if err != nil {
		return nil, err
	}
	return res, StaleResult(res, bound)
}

// WeightVersion implements engine.Engine.
func (s *VLLMServer) WeightVersion() int64 { return s.client.WeightVersion() }

// Close implements engine.Engine.
func (s *VLLMServer) Close() error { return s.client.Close() }

// Status implements PolicyServer.
func (s *VLLMServer) Status() ServerStatus { return ServerStatus{} }

// Publish loads src's weights on every server as version: its adapters
// once it has them, else its model; it returns once every server serves
// version.
func (s *VLLMServer) Publish(ctx context.Context, version int64, src Source) error {
	ad, err := src.Adapter(ctx)
	if err != nil {
		return err
	}
	defer s.logWhere()
	if ad != nil {
		err = s.loadAdapter(ctx, version, *ad, src)
	} else {
		err = s.reload(ctx, version, "step-", src)
		// Adapters not started yet: these weights are the base they will
		// start on.
		s.base = err == nil
	}
	if err != nil {
		return err
	}
	if err := s.checkServing(version, version); err != nil {
		return err
	}
	s.prune("step-", version-int64(s.cfg.Keep)+1)
	return nil
}

// loadAdapter writes u under Dir/step-N/ and loads it on every server,
// reloading the base first when the servers may not hold it: at start, and
// when a server lost its weights (vllm.ErrServerLost: it restarted, and an
// adapter on the base it started with would not be the policy).
func (s *VLLMServer) loadAdapter(ctx context.Context, version int64, u weights.Update, src Source) error {
	for _, st := range s.client.Servers() {
		// A server not found (restarting elsewhere, or gone) gets the base
		// when an update finds it again (vllm.ErrServerLost below).
		if st.Lost != "" && st.Missing == "" {
			s.log.Warn("vllm: reloading the base", "policy", s.cfg.Policy, "server", st.URL, "lost", st.Lost)
			s.base = false
		}
	}
	if err := weights.CheckFinite(u.Tensors); err != nil {
		return fmt.Errorf("adapter of version %d for vLLM: %w", version, err)
	}
	dir := filepath.Join(s.cfg.Dir, "step-"+strconv.FormatInt(version, 10))
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("vLLM weights: %w", err)
	}
	if err := weights.WriteAdapter(dir, u, s.cfg.Client.Model); err != nil {
		return fmt.Errorf("adapter of version %d for vLLM: %w", version, err)
	}
	s.written(dir)
	for try := 0; ; try++ {
		if !s.base {
			// The learner's model is the frozen base: reloaded as this
			// version, then the adapter on top.
			if err := s.reload(ctx, version, "base-", src); err != nil {
				return err
			}
			s.prune("base-", version) // older bases
			s.base = true
		}
		err := s.load(ctx, version, dir)
		if errors.Is(err, vllm.ErrServerLost) && try == 0 {
			s.log.Warn("vllm: reloading the base", "policy", s.cfg.Policy, "err", err)
			s.base = false
			continue
		}
		return err
	}
}

// load makes every server load the adapter in dir as version.
func (s *VLLMServer) load(ctx context.Context, version int64, dir string) error {
	if err := s.stage(ctx, version, dir); err != nil {
		return err
	}
	rctx, cancel := context.WithTimeout(ctx, s.cfg.ReloadTimeout)
	err := s.client.LoadLoRA(rctx, s.cfg.LoRAName, dir, version)
	timedOut := rctx.Err() != nil && ctx.Err() == nil
	cancel()
	switch {
	case err != nil && timedOut:
		return fmt.Errorf("version %d: the vLLM servers did not confirm loading the adapter within %v: %w", version, s.cfg.ReloadTimeout, err)
	case err != nil:
		return fmt.Errorf("version %d: %w", version, err)
	}
	return nil
}

// reload writes src's model into Dir/<prefix>N and makes every server
// reload it as version.
func (s *VLLMServer) reload(ctx context.Context, version int64, prefix string, src Source) error {
	tmp := filepath.Join(s.cfg.Dir, fmt.Sprintf("writing-%d", time.Now().UnixNano()))
	if err := src.WriteModel(ctx, tmp); err != nil {
		_ = os.RemoveAll(tmp)
		return err
	}
	if err := checkFiniteModel(ctx, tmp); err != nil {
		_ = os.RemoveAll(tmp)
		return fmt.Errorf("model of version %d for vLLM: %w", version, err)
	}
	dir := filepath.Join(s.cfg.Dir, prefix+strconv.FormatInt(version, 10))
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("vLLM weights: %w", err)
	}
	if err := os.Rename(tmp, dir); err != nil {
		_ = os.RemoveAll(tmp)
		return fmt.Errorf("vLLM weights: %w", err)
	}
	s.written(dir)
	if err := s.stage(ctx, version, dir); err != nil {
		return err
	}
	rctx, cancel := context.WithTimeout(ctx, s.cfg.ReloadTimeout)
	err := s.client.ReloadWeights(rctx, dir, version)
	timedOut := rctx.Err() != nil && ctx.Err() == nil
	cancel()
	s.logRoutes()
	switch {
	case err != nil && timedOut:
		return fmt.Errorf("version %d: the vLLM servers did not confirm the reload within %v: %w", version, s.cfg.ReloadTimeout, err)
	case err != nil:
		return fmt.Errorf("version %d: %w", version, err)
	}
	return nil
}

// stage copies dir onto the nodes of the servers that do not see it,
// within StageTimeout, before the reload's own bound starts.
func (s *VLLMServer) stage(ctx context.Context, version int64, dir string) error {
	sctx, cancel := context.WithTimeout(ctx, s.cfg.StageTimeout)
	err := s.client.Stage(sctx, dir)
	timedOut := sctx.Err() != nil && ctx.Err() == nil
	cancel()
	switch {
	case err != nil && timedOut:
		return fmt.Errorf("version %d: copying %s onto the nodes of the vLLM servers that do not see it took over %v: %w", version, dir, s.cfg.StageTimeout, err)
	case err != nil:
		return fmt.Errorf("version %d: %w", version, err)
	}
	return nil
}

func (s *VLLMServer) written(dir string) {
	if s.cfg.Written != nil {
		s.cfg.Written(dir)
	}
}

// logWhere logs a server that an update did not find (a launched server
// restarting, or gone), and one found again or at another URL.
func (s *VLLMServer) logWhere() {
	for i, st := range s.client.Servers() {
		now := st.URL
		if st.Missing != "" {
			now = "not found: " + st.Missing
		}
		if i >= len(s.where) {
			s.where = append(s.where, st.URL)
		}
		if s.where[i] == now {
			continue
		}
		if st.Missing != "" {
			s.log.Warn("vllm server not found: it sits weight updates out and gets no requests until one finds it", "policy", s.cfg.Policy, "server", i, "last_url", st.URL, "why", st.Missing)
		} else {
			s.log.Info("vllm server found", "policy", s.cfg.Policy, "server", i, "url", st.URL, "was", s.where[i])
		}
		s.where[i] = now
	}
}

// logRoutes logs each server's reload route when it is first known or
// changes.
func (s *VLLMServer) logRoutes() {
	if s.routes == nil {
		s.routes = map[string]vllm.WeightUpdate{}
	}
	for _, st := range s.client.Servers() {
		if st.WeightUpdate != "" && s.routes[st.URL] != st.WeightUpdate {
			s.routes[st.URL] = st.WeightUpdate
			s.log.Info("vllm weight update", "policy", s.cfg.Policy, "server", st.URL, "route", string(st.WeightUpdate))
		}
	}
}

// checkServing fails unless every server that gets requests serves a
// version in [lo, hi]. A lost one gets none until an update reaches it
// (and, where the servers are launched, one not found sits updates out).
func (s *VLLMServer) checkServing(lo, hi int64) error {
	var wrong []string
	for _, st := range s.client.Servers() {
		if st.Lost != "" {
			continue
		}
		if st.WeightVersion < lo || st.WeightVersion > hi {
			wrong = append(wrong, fmt.Sprintf("%s serves version %d", st.URL, st.WeightVersion))
		}
	}
	switch {
	case len(wrong) == 0:
		return nil
	case lo == hi:
		return fmt.Errorf("vLLM servers not on version %d: %s", lo, strings.Join(wrong, "; "))
	default:
		return fmt.Errorf("vLLM servers not on a version in [%d, %d]: %s", lo, hi, strings.Join(wrong, "; "))
	}
}

// StaleResult names the first result older than version bound (the
// oldest a step's samples may be: its on-policy version minus the max
// staleness); nil when none is.
func StaleResult(res []engine.Result, bound int64) error {
	for _, r := range res {
		if r.WeightVersion < bound {
			return fmt.Errorf("request %s: weight version %d, older than the %d the max staleness allows", r.RequestID, r.WeightVersion, bound)
		}
	}
	return nil
}

// prune deletes Dir's directories prefix+N with N < below.
func (s *VLLMServer) prune(prefix string, below int64) {
	ents, err := os.ReadDir(s.cfg.Dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		num, ok := strings.CutPrefix(e.Name(), prefix)
		if !ok || !e.IsDir() {
			continue
		}
		if n, err := strconv.ParseInt(num, 10, 64); err == nil && n < below {
			if err := os.RemoveAll(filepath.Join(s.cfg.Dir, e.Name())); err != nil {
				s.log.Warn("vllm weights: prune", "dir", e.Name(), "err", err)
			}
		}
	}
}

var _ PolicyServer = (*VLLMServer)(nil)

// checkFiniteModel refuses a written model holding a NaN or an infinity
// (a diverged learner step), before any server is asked to load it: vLLM
// would serve it without a word.
func checkFiniteModel(ctx context.Context, dir string) error {
	ck, err := safetensors.OpenCheckpointContext(ctx, dir)
	if err != nil {
		return err
	}
	for _, name := range ck.Names() {
		if err := ctx.Err(); err != nil {
			return err
		}
		t, _, ok := ck.Tensor(name)
		if !ok {
			return fmt.Errorf("%s: tensor %q listed but not found", dir, name)
		}
		if _, err := t.FiniteFloat32(); err != nil {
			return err
		}
	}
	return nil
}
