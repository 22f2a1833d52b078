package learner

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"sync"
	"time"

	"github.com/rlnode/rlnode/actor"
	"github.com/rlnode/rlnode/learner/safetensors"
)

// ActorKind is the kind name of the learner actor: it hosts a Learner
// (policy, optimizer, reference, optional value head) on its node and
// trains it on the batches it is sent. Messages are handled one at a time,
// so a Train call and a weights request never overlap.
const ActorKind = "learner"

// ActorConfig is the spawn argument of a learner actor.
type ActorConfig struct {
	Config Config
	// ResumeDir, when set, is a checkpoint (Save) loaded at spawn time.
	ResumeDir string
	// Folders, when set, serves the folders the learner reads and takes
	// the checkpoints it saves when its node does not see the run folder
	// (folders.go); nil: every folder is read and written where it is
	// named.
	Folders *Folders `msgpack:",omitempty"`
}

// TrainRequest asks for one Train call; the reply is Stats. The batch is
// Batch, or, sent to a learner on another node (PrepareTrain), Packed or
// At: a batch is not bounded by the actor message limit, only by the
// learner node's MaxTrainBatchBytes.
type TrainRequest struct {
	Batch Batch
	// Packed is the batch's msgpack bytes (actor.EncodeMessage), encoded
	// once for every rank it goes to.
	Packed []byte `msgpack:",omitempty"`
	// At names those bytes on the sender's bulk path, for a batch larger
	// than the sender's inline limit; the learner fetches them.
	At *actor.BulkRef `msgpack:",omitempty"`
}

// MaxTrainBatchBytes is the largest packed batch (TrainRequest.At) a
// learner on this node fetches: a quarter of the memory it may use
// (actor.HostMemory), at least 64 MiB, or 4 GiB where the memory cannot
// be read. A batch takes about its packed size again once decoded.
func MaxTrainBatchBytes() int64 {
	const least, unknown = 64 << 20, 4 << 30
	m := actor.HostMemory()
	if m <= 0 {
		return unknown
	}
	return max(m/4, least)
}

// trainBatchTTL bounds how long an offered batch waits for its learners;
// PrepareTrain's release withdraws it sooner.
const trainBatchTTL = 10 * time.Minute

// PrepareTrain builds the TrainRequest of batch b for each of targets,
// learner actors to call from sys: a learner on sys's node gets b itself
// (no encoding); the others get b encoded once, inside the message when
// it fits sys's inline limit, else offered once on sys's bulk path for
// all of them to fetch. Call release once the calls have their answers:
// it withdraws the offer.
func PrepareTrain(sys *actor.System, b Batch, targets []actor.Ref) (reqs []TrainRequest, release func(), err error) {
	reqs = make([]TrainRequest, len(targets))
	remote := 0
	for i, t := range targets {
		if t.Address == sys.Address() {
			reqs[i] = TrainRequest{Batch: b}
		} else {
			remote++
		}
	}
	release = func() {}
	if remote == 0 {
		return reqs, release, nil
	}
	_, packed, err := actor.EncodeMessage(b)
	if err != nil {
		return nil, nil, fmt.Errorf("encode the train batch: %w", err)
	}
	req := TrainRequest{Packed: packed}
	// The envelope and an empty Batch add well under 4 KiB.
	if len(packed) > sys.InlineLimit()-4096 {
		ref := sys.Bulk().Offer(packed, remote, trainBatchTTL)
		req = TrainRequest{At: &ref}
		release = func() { sys.Bulk().Release(ref) }
	}
	for i, t := range targets {
		if t.Address != sys.Address() {
			reqs[i] = req
		}
	}
	return reqs, release, nil
}

// LoadBatch is the batch r carries, fetched from the sender's bulk path
// with sys when r names it there (At). A batch over this node's
// MaxTrainBatchBytes is refused before anything is fetched, with an error
// wrapping actor.ErrTooLarge.
func (r TrainRequest) LoadBatch(ctx context.Context, sys *actor.System) (Batch, error) {
	body := r.Packed
	if r.At != nil {
		if lim := MaxTrainBatchBytes(); r.At.Size < 0 || r.At.Size > lim {
			return Batch{}, fmt.Errorf("train batch of %d bytes at %s: over this node's %d-byte bound (a quarter of its memory): %w",
				r.At.Size, r.At.Addr, lim, actor.ErrTooLarge)
		}
		// It must keep arriving: 2 minutes, and 1 s per 64 MiB.
		fctx, cancel := context.WithTimeout(ctx, 2*time.Minute+time.Duration(r.At.Size>>26)*time.Second)
		defer cancel()
		var err error
		if body, err = sys.Bulk().Fetch(fctx, *r.At); err != nil {
			return Batch{}, fmt.Errorf("fetch the train batch: %w", err)
		}
	}
	if body == nil {
		return r.Batch, nil
	}
	v, err := actor.DecodeMessage(batchTypeName(), body)
	if err != nil {
		return Batch{}, fmt.Errorf("train batch: %w", err)
	}
	return v.(Batch), nil
}

// batchTypeName is Batch's registered message name (PrepareTrain's
// encoding).
var batchTypeName = sync.OnceValue(func() string {
	name, _, _ := actor.EncodeMessage(Batch{})
	return name
})

// SetAlgorithmRequest switches the algorithm (SFT warm-up, then RL); the
// reply is AlgorithmSet.
type SetAlgorithmRequest struct {
	Algorithm string
	LR        float64 // > 0 replaces the peak learning rate; 0 keeps it
}

// AlgorithmSet acknowledges SetAlgorithmRequest.
type AlgorithmSet struct {
	Algorithm string
}

// WeightsRequest asks for the policy's current weights as a bulk offer;
// the reply is WeightsOffer.
type WeightsRequest struct {
	// Readers is how many fetches the offer allows (one per engine); 0
	// means 1.
	Readers int
	// TTL bounds how long the offer stays up; 0 means two minutes.
	TTL time.Duration
	// Part is which weights: WeightsPolicy (""), WeightsBase or
	// WeightsAdapter.
	Part string
}

// Parts of the policy a WeightsRequest asks for.
const (
	// WeightsPolicy is what an engine serves: under LoRA the base with
	// the adapters merged in.
	WeightsPolicy = ""
	// WeightsBase is the frozen base under LoRA (else the policy).
	WeightsBase = "base"
	// WeightsAdapter is the LoRA adapters' tensors only (PEFT names), with
	// WeightsOffer.Adapter describing them; a learner whose adapters have
	// not started offers the policy instead, with Adapter nil.
	WeightsAdapter = "adapter"
)

// PolicyWeightsPart is what a WeightsRequest for part offers (see the
// Weights* constants) and the adapter it carries, if any. It checks ctx
// while it copies the weights (a large model's take seconds) and gives
// up, with an error wrapping ctx's, once it is done.
func (l *Learner) PolicyWeightsPart(ctx context.Context, part string) (map[string][]float32, *AdapterInfo, error) {
	var w map[string][]float32
	var a *AdapterInfo
	var err error
	switch part {
	case WeightsPolicy:
		w, err = l.policyWeights(ctx)
	case WeightsBase:
		w, err = l.baseWeights(ctx)
	case WeightsAdapter:
		if a = l.Adapter(); a != nil {
			w = l.AdapterWeights()
		} else {
			w, err = l.policyWeights(ctx)
		}
	default:
		return nil, nil, fmt.Errorf("weights: part %q: want \"\", %q or %q", part, WeightsBase, WeightsAdapter)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("weights: %w", err)
	}
	return w, a, nil
}

// WeightsOffer names the weights offered on the learner's node's bulk
// path: a safetensors file (float32, no value head) of Size bytes. Fetch
// it with System().Bulk().Fetch and read it with DecodeWeights.
type WeightsOffer struct {
	Step int // optimizer steps behind these weights
	Ref  actor.BulkRef
	// Adapter is set when the offer holds LoRA adapter tensors
	// (WeightsAdapter).
	Adapter *AdapterInfo
}

// SaveRequest asks for a checkpoint in Dir (on the learner's node); the
// reply is Saved.
type SaveRequest struct {
	Dir string
}

// Saved acknowledges SaveRequest.
type Saved struct {
	Dir  string
	Step int
	// Staged, from a learner that does not see the run folder (Folders),
	// lists the files it wrote into its staging folder (Staged.Dir) for
	// Dir: the saver pulls them with FetchFolder, then sends
	// StagedDoneRequest{Dir: Staged.Dir}.
	Staged *FolderManifest `msgpack:",omitempty"`
}

// ListRequest asks a learner which entries its node sees in Dir; the
// reply is Listed. The driver asks it of every rank for the run folder it
// has just written a file into: a folder that is not shared between the
// driver's host and a learner's (a local disk on each) would otherwise go
// unnoticed until a checkpoint came out split between hosts.
type ListRequest struct {
	Dir string
}

// Listed answers ListRequest: the names in Dir (at most MaxListed, sorted),
// and the learner's host name, actor address and device, for the driver's
// errors and the placement it logs.
type Listed struct {
	Names     []string
	Truncated bool
	Host      string
	Addr      string
	Device    string `msgpack:",omitempty"` // Config.Device as the learner opened it; "" is the CPU
	// Staged: the learner did not see the run folder when it was built;
	// it lists nothing, and its folders travel over the bulk path
	// (Folders).
	Staged bool `msgpack:",omitempty"`
}

// MaxListed bounds Listed.Names.
const MaxListed = 4096

// ListDir answers a ListRequest on this node, for a learner on device.
func ListDir(dir, addr, device string) (Listed, error) {
	if dir == "" {
		return Listed{}, fmt.Errorf("list: empty directory")
	}
	f, err := os.Open(dir)
	if err != nil {
		return Listed{}, err
	}
	defer f.Close()
	names, err := f.Readdirnames(MaxListed + 1)
	if err != nil && !errors.Is(err, io.EOF) {
		return Listed{}, fmt.Errorf("list %s: %w", dir, err)
	}
	host, _ := os.Hostname()
	out := Listed{Host: host, Addr: addr, Device: device}
	if len(names) > MaxListed {
		names, out.Truncated = names[:MaxListed], true
	}
	sort.Strings(names)
	out.Names = names
	return out, nil
}

// LoadRequest replaces the learner's state with the checkpoint in Dir; the
// reply is Loaded.
type LoadRequest struct {
	Dir string
}

// Loaded acknowledges LoadRequest.
type Loaded struct {
	Step int
}

func init() {
	actor.RegisterMessage(ActorConfig{}, TrainRequest{}, Batch{}, Stats{}, SetAlgorithmRequest{}, AlgorithmSet{}, AdapterInfo{},
		WeightsRequest{}, WeightsOffer{}, SaveRequest{}, Saved{}, ListRequest{}, Listed{}, LoadRequest{}, Loaded{},
		Folders{}, FolderFile{}, FolderManifest{}, ManifestRequest{}, ChunkRequest{}, Chunk{}, StagedDoneRequest{}, StagedDone{})
	actor.RegisterKind(ActorKind, func(ctx *actor.Context, args any) (actor.Actor, error) {
		cfg, ok := args.(ActorConfig)
		if !ok {
			return nil, fmt.Errorf("learner actor: spawn args are %T, want learner.ActorConfig", args)
		}
		if cfg.Config.Shards > 1 {
			return nil, fmt.Errorf("learner actor: config shards %d: a sharded learner is %d actors of kind learner-shard joined by learner/shard.NewGroup, not one learner actor", cfg.Config.Shards, cfg.Config.Shards)
		}
		l, st, err := OpenActor(ctx, cfg)
		if err != nil {
			return nil, err
		}
		return &learnerActor{l: l, st: st}, nil
	})
}

type learnerActor struct {
	l  *Learner
	st *Staging // nil when the node sees the run folder
}

// Stopped implements actor.Stopper: the learner's device is released,
// and its staging folder removed.
func (a *learnerActor) Stopped(*actor.Context) {
	a.l.Close()
	if a.st != nil {
		a.st.Close()
	}
}

// Receive implements actor.Actor.
func (a *learnerActor) Receive(ctx *actor.Context, msg any) (any, error) {
	switch m := msg.(type) {
	case TrainRequest:
		// The actor's context ends when it is stopped (a run that ends, a
		// node that stops): a long step must not hold the stop up.
		b, err := m.LoadBatch(ctx.Context(), ctx.System())
		if err != nil {
			return nil, fmt.Errorf("learner actor: %w", err)
		}
		return a.l.TrainContext(ctx.Context(), b)
	case SetAlgorithmRequest:
		if err := a.l.SetAlgorithm(m.Algorithm, m.LR); err != nil {
			return nil, err
		}
		return AlgorithmSet{Algorithm: m.Algorithm}, nil
	case WeightsRequest:
		w, ad, err := a.l.PolicyWeightsPart(ctx.Context(), m.Part)
		if err != nil {
			return nil, fmt.Errorf("learner actor: %w", err)
		}
		data, err := EncodeWeightsContext(ctx.Context(), w)
		if err != nil {
			return nil, fmt.Errorf("learner actor: weights: %w", err)
		}
		ttl := m.TTL
		if ttl <= 0 {
			ttl = 2 * time.Minute
		}
		return WeightsOffer{Step: a.l.Step(), Ref: ctx.System().Bulk().Offer(data, m.Readers, ttl), Adapter: ad}, nil
	case SaveRequest:
		if m.Dir == "" {
			return nil, fmt.Errorf("learner actor: save: empty directory")
		}
		if a.st != nil {
			man, err := a.st.Save(ctx.Context(), m.Dir, func(dir string) error { return a.l.SaveContext(ctx.Context(), dir) })
			if err != nil {
				return nil, err
			}
			return Saved{Dir: m.Dir, Step: a.l.Step(), Staged: man}, nil
		}
		if err := a.l.SaveContext(ctx.Context(), m.Dir); err != nil {
			return nil, err
		}
		return Saved{Dir: m.Dir, Step: a.l.Step()}, nil
	case ListRequest:
		if a.st != nil {
			l := a.st.Listed()
			l.Device = a.l.Config().Device
			return l, nil
		}
		return ListDir(m.Dir, ctx.System().Address(), a.l.Config().Device)
	case LoadRequest:
		load := func(dir string) error { return a.l.LoadContext(ctx.Context(), dir) }
		var err error
		if a.st != nil {
			err = a.st.Load(ctx.Context(), m.Dir, load)
		} else {
			err = load(m.Dir)
		}
		if err != nil {
			return nil, err
		}
		return Loaded{Step: a.l.Step()}, nil
	}
	if a.st != nil {
		if reply, ok, err := a.st.Serve(msg); ok {
			return reply, err
		}
	}
	return nil, fmt.Errorf("learner actor: unexpected message %T", msg)
}

// EncodeWeights writes weights (name → float32 values) as safetensors
// bytes, tensors sorted by name, each 1-D: the receiver knows the shapes
// from its own model.
func EncodeWeights(w map[string][]float32) ([]byte, error) {
	return EncodeWeightsContext(context.Background(), w)
}

// EncodeWeightsContext is EncodeWeights that checks ctx between tensors
// and gives up, with an error wrapping ctx's, once it is done: a large
// model's weights take seconds to encode, which a stopping node should
// not wait. The bytes are EncodeWeights'.
func EncodeWeightsContext(ctx context.Context, w map[string][]float32) ([]byte, error) {
	names := make([]string, 0, len(w))
	for n := range w {
		names = append(names, n)
	}
	sort.Strings(names)
	ts := make([]safetensors.Tensor, 0, len(names))
	for _, n := range names {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("encode weights: %w", err)
		}
		t, err := safetensors.FromFloat32(n, safetensors.F32, []int{len(w[n])}, w[n])
		if err != nil {
			return nil, err
		}
		ts = append(ts, t)
	}
	return safetensors.EncodeContext(ctx, ts, nil)
}

// DecodeWeights reads EncodeWeights' bytes; what names the payload in
// errors.
func DecodeWeights(what string, data []byte) (map[string][]float32, error) {
	return DecodeWeightsContext(context.Background(), what, data)
}

// DecodeWeightsContext is DecodeWeights that checks ctx between tensors
// and gives up, with an error wrapping ctx's, once it is done.
func DecodeWeightsContext(ctx context.Context, what string, data []byte) (map[string][]float32, error) {
	f, err := safetensors.Parse(what, data)
	if err != nil {
		return nil, err
	}
	out := make(map[string][]float32, len(f.Names()))
	for _, n := range f.Names() {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		v, _, err := f.Float32(n)
		if err != nil {
			return nil, err
		}
		out[n] = v
	}
	return out, nil
}
