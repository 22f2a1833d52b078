package weights

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/rlnode/rlnode/actor"
	"github.com/rlnode/rlnode/learner/safetensors"
	"github.com/rlnode/rlnode/rollout/engine"
	"github.com/rlnode/rlnode/rollout/native"
)

// EngineKind is the actor kind that hosts a native engine on its node and
// accepts weight pushes (Push), version queries (VersionRequest) and plain
// generation (Generate, served one call at a time: the rollout actor is
// the place for batched episode work).
const EngineKind = "weightsync.engine"

// EngineConfig is the spawn argument of an EngineKind actor.
type EngineConfig struct {
	Model    string // checkpoint directory the native engine loads (config.json, safetensors, tokenizer.json)
	MaxBatch int    // native.Config.MaxBatch; 0 takes its default
	Version  int64  // the weight version the checkpoint holds
	Device   string // native.Config.Device: where the model runs ("" is the cpu)
}

// Push asks an engine host to pull a version's weights from the bulk offer
// Blob (a safetensors payload written by the weight-sync actor) and serve
// them. The host answers with an EngineVersion.
type Push struct {
	Version int64
	Blob    actor.BulkRef
	// Timeout bounds the host's fetch and swap (default 2 min; the
	// caller's own wait is bounded too).
	Timeout time.Duration
}

// VersionRequest asks an engine host for the version it serves.
type VersionRequest struct{}

// EngineVersion is the version an engine host serves.
type EngineVersion struct {
	Engine  string // actor name
	Address string // actor address of its node
	Version int64
}

// Generate runs requests on the hosted engine.
type Generate struct {
	Requests []engine.Request
}

// Generated answers Generate.
type Generated struct {
	Results []engine.Result
}

func init() {
	actor.RegisterMessage(EngineConfig{}, Push{}, VersionRequest{}, EngineVersion{}, Generate{}, Generated{})
	actor.RegisterKind(EngineKind, func(ctx *actor.Context, args any) (actor.Actor, error) {
		cfg, ok := args.(EngineConfig)
		if !ok {
			return nil, fmt.Errorf("%s: spawn args are %T, want weights.EngineConfig", EngineKind, args)
		}
		if cfg.Model == "" {
			return nil, fmt.Errorf("%s: EngineConfig.Model: no checkpoint directory", EngineKind)
		}
		e, err := native.LoadContext(ctx.Context(), cfg.Model, native.Config{MaxBatch: cfg.MaxBatch, WeightVersion: cfg.Version, Device: cfg.Device})
		if err != nil {
			return nil, fmt.Errorf("%s: %w", EngineKind, err)
		}
		return &engineHost{name: ctx.Self().Name, eng: e, own: true, recv: &Receiver{Engine: e, Base: CheckpointBase(cfg.Model)}}, nil
	})
}

// WeightSetter is what a Receiver applies weights to; *native.Engine is
// one. SetWeights must apply all tensors as one version or none.
type WeightSetter interface {
	SetWeights(ctx context.Context, version int64, weights map[string][]float32) error
	WeightVersion() int64
}

// Receiver is the engine side of a push: it pulls the offered payload over
// the bulk path (on one host: maps the publisher's copy, FetchView),
// decodes it in place and applies it. Any actor hosting an engine can
// answer Push with it. LoRA updates are merged onto base weights it reads
// once through Base and keeps current across full updates.
type Receiver struct {
	Engine WeightSetter
	// Base returns the named weights the engine started with (for merging
	// LoRA adapters), giving up once ctx (the push's) is done; nil refuses
	// LoRA updates.
	Base func(ctx context.Context, names []string) (map[string][]float32, error)

	mu   sync.Mutex // one push at a time
	base map[string][]float32
}

// CheckpointBase reads base weights (for merging LoRA adapters) from the
// checkpoint dir: the Base of a Receiver, or Serve's base. It checks ctx
// while it reads and between tensors.
func CheckpointBase(dir string) func(context.Context, []string) (map[string][]float32, error) {
	return func(ctx context.Context, names []string) (map[string][]float32, error) {
		ck, err := safetensors.OpenCheckpointContext(ctx, dir)
		if err != nil {
			return nil, fmt.Errorf("base weights: %w", err)
		}
		out := make(map[string][]float32, len(names))
		for _, n := range names {
			if err := ctx.Err(); err != nil {
				return nil, fmt.Errorf("base weights of %s: %w", dir, err)
			}
			t, path, ok := ck.Tensor(n)
			if !ok {
				return nil, fmt.Errorf("base weights: %s has no tensor %q", path, n)
			}
			v, err := t.FiniteFloat32()
			if err != nil {
				return nil, fmt.Errorf("base weights: %s: %w", path, err)
			}
			out[n] = v
		}
		return out, nil
	}
}

// Apply fetches p's payload with sys's bulk client and applies it to the
// engine, within ctx and p.Timeout (default 2 min).
func (r *Receiver) Apply(ctx context.Context, sys *actor.System, p Push) error {
	timeout := p.Timeout
	if timeout <= 0 {
		timeout = DefaultPushTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	r.mu.Lock()
	defer r.mu.Unlock()
	if cur := r.Engine.WeightVersion(); p.Version <= cur {
		if p.Version == cur {
			return nil // already served (the publisher releases the offer)
		}
		return fmt.Errorf("push version %d: older than the served version %d", p.Version, cur)
	}
	// On one host the payload is the publisher's copy mapped read-only,
	// and the tensors lie in it: no copy here before the engine's own.
	blob, release, err := sys.Bulk().FetchView(ctx, p.Blob)
	if err != nil {
		return fmt.Errorf("push version %d: %w", p.Version, err)
	}
	defer release()
	version, u, err := DecodeView(fmt.Sprintf("bulk %s from %s", p.Blob.ID, p.Blob.Addr), blob)
	if err != nil {
		return fmt.Errorf("push version %d: %w", p.Version, err)
	}
	if version != p.Version {
		return fmt.Errorf("push version %d: the payload holds version %d", p.Version, version)
	}
	weights := u.Tensors
	if u.LoRA != nil {
		if weights, err = r.merged(ctx, u); err != nil {
			return fmt.Errorf("push version %d: %w", p.Version, err)
		}
	}
	if err := r.Engine.SetWeights(ctx, p.Version, weights); err != nil {
		return fmt.Errorf("push version %d: %w", p.Version, err)
	}
	if u.LoRA == nil && r.Base != nil {
		// A full update moves the base that later adapters merge onto: keep
		// a copy of its projection weights (the decoded ones lie in the
		// payload, released on return), in the buffers of the last.
		if r.base == nil {
			r.base = map[string][]float32{}
		}
		for n, v := range weights {
			if strings.HasSuffix(n, "_proj.weight") {
				r.base[n] = append(r.base[n][:0], v...)
			}
		}
	}
	return nil
}

func (r *Receiver) merged(ctx context.Context, u Update) (map[string][]float32, error) {
	if r.Base == nil {
		return nil, errors.New("lora: this engine host has no base weights to merge adapters onto")
	}
	names, err := loraBaseNames(u)
	if err != nil {
		return nil, err
	}
	var missing []string
	for _, n := range names {
		if _, ok := r.base[n]; !ok {
			missing = append(missing, n)
		}
	}
	if len(missing) > 0 {
		got, err := r.Base(ctx, missing)
		if err != nil {
			return nil, err
		}
		if r.base == nil {
			r.base = map[string][]float32{}
		}
		for n, v := range got {
			r.base[n] = v
		}
	}
	return mergeLoRA(u, r.base)
}

// engineHost is the EngineKind actor (and Serve's).
type engineHost struct {
	name string
	eng  engine.Engine
	recv *Receiver
	own  bool // close the engine when the actor stops
}

func (h *engineHost) Receive(ctx *actor.Context, msg any) (any, error) {
	switch m := msg.(type) {
	case Push:
		// The push call's context: its caller giving up, or a stop of the
		// host (its rollout actor's, its node's), ends a push in progress
		// instead of waiting for it.
		if err := h.recv.Apply(ctx.Context(), ctx.System(), m); err != nil {
			return nil, fmt.Errorf("engine %s on %s: %w", h.name, ctx.System().Address(), err)
		}
		return h.version(ctx), nil
	case VersionRequest:
		return h.version(ctx), nil
	case Generate:
		gctx, cancel := context.WithTimeout(ctx.Context(), generateTimeout)
		defer cancel()
		res, err := h.eng.Generate(gctx, m.Requests)
		if err != nil {
			return nil, err
		}
		return Generated{Results: res}, nil
	}
	return nil, fmt.Errorf("engine %s: unexpected message %T", h.name, msg)
}

func (h *engineHost) version(ctx *actor.Context) EngineVersion {
	return EngineVersion{Engine: h.name, Address: ctx.System().Address(), Version: h.eng.WeightVersion()}
}

func (h *engineHost) Stopped(*actor.Context) {
	if h.own {
		_ = h.eng.Close()
	}
}

// DefaultPushTimeout bounds a push whose Push.Timeout is unset.
const DefaultPushTimeout = 2 * time.Minute

// generateTimeout bounds one Generate call on a host.
const generateTimeout = 10 * time.Minute

// HostedEngine is an engine an in-process host serves: generation, version,
// and SetWeights.
type HostedEngine interface {
	engine.Engine
	SetWeights(ctx context.Context, version int64, weights map[string][]float32) error
}

// Serve hosts an engine this process already runs as a local actor
// named name that accepts pushes, so a weight syncer can register it. base
// supplies the weights LoRA adapters merge onto (nil refuses LoRA
// updates). The caller keeps owning e: stopping the actor does not close
// it.
func Serve(sys *actor.System, name string, e HostedEngine, base func(ctx context.Context, names []string) (map[string][]float32, error)) (actor.Ref, error) {
	h := &engineHost{name: name, eng: e, recv: &Receiver{Engine: e, Base: base}}
	return sys.SpawnLocal(actor.LocalSpawn{Name: name, Kind: EngineKind, Factory: func(*actor.Context, any) (actor.Actor, error) {
		return h, nil
	}})
}
