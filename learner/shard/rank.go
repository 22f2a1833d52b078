package shard

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"sort"
	"time"

	"github.com/rlnode/rlnode/learner"
	"github.com/rlnode/rlnode/learner/backend"
	"github.com/rlnode/rlnode/learner/model"
	"github.com/rlnode/rlnode/learner/optim"
)

// Options tune a rank's collectives. The zero value takes the defaults.
type Options struct {
	// Timeout bounds every collective (one gradient bucket's reduction,
	// from its start during backward; the weights' all-gather; a
	// statistics sum): a rank that sends nothing for this long fails the
	// step on every rank, naming it. Default 60 s.
	Timeout time.Duration
	// BucketElems is the size of one ring bucket in float32 elements
	// (default 1 Mi = 4 MiB). A gradient bucket starts once backward has
	// finished all of its tensors, so smaller buckets overlap more of the
	// backward pass but pay the per-chunk latency more often.
	BucketElems int
	// InFlight is how many buckets are on the wire at once (default 4:
	// against 2, BenchmarkAllReduceLoopback gained 10-30% at 16 and 64 MiB
	// between 2 processes here; 8 gained nothing over 4 beyond the noise).
	InFlight int
}

func (o Options) withDefaults() Options {
	if o.Timeout <= 0 {
		o.Timeout = time.Minute
	}
	if o.BucketElems <= 0 {
		o.BucketElems = 1 << 20
	}
	if o.InFlight <= 0 {
		o.InFlight = 4
	}
	return o
}

// ErrGroupFailed marks a rank whose group lost a collective: its weights
// may differ from the other ranks', so it trains no more until the group
// restarts from a checkpoint (Rank.Restart, Group.Restart).
var ErrGroupFailed = errors.New("learner group failed; restart it from a checkpoint")

// testAfterSend, when set (by a test's child process), runs after every
// collective send: the failure test kills its rank there, mid-step.
var testAfterSend func(Tag)

// piece is a part of one trainable tensor a ZeRO-1 rank owns: elements
// [lo, hi) of tensor ti, at flat offset off.
type piece struct {
	ti, lo, hi, off int
	name            string
}

// Rank is one learner of a data-parallel group: it joins the Learner to the
// others through a Transport and does the step's update (learner.Sharding).
// Stage 0 all-reduces the gradients and steps the learner's own AdamW on
// every rank; stage 1 (ZeRO-1) reduce-scatters them, steps AdamW on the
// slice this rank owns (its moments are the only ones it keeps) and
// all-gathers the updated weights. Not safe for concurrent use.
type Rank struct {
	l     *learner.Learner
	t     Transport
	ring  *ring
	opt   Options
	stage int
	epoch uint64
	op    uint64

	names []string
	sizes []int
	order []int // trainable tensors in flat order: gradient-ready order
	offs  []int // flat offset of each trainable tensor
	total int
	flat  []float32
	// pending is the step's gradient reduction once begun (by the
	// backward hook or by update); only the learner's goroutine touches it.
	pending *overlap
	pieces  []piece      // stage 1: what this rank owns
	zopt    *optim.AdamW // stage 1: AdamW over pieces
	// viewOp is the last collective whose result this rank read through
	// its view (viewHeld: the other ranks may still be reading theirs, so
	// this rank's buffer must not change before they release it).
	viewOp   uint64
	viewHeld bool
	// reduceOp is the step's gradient reduction's collective number.
	reduceOp uint64
	// stage 1 on a device: the pieces as slices of the trainable tensors
	// and their ranges of flat (gradients in, weights out).
	slices []model.Slice
	spans  [][]float32
	// pinned is flat where it came from the learner's backend
	// (page-locked host memory the device copies to and from directly);
	// registered is the shared buffer the backend page-locked.
	pinned, registered []float32
	failed             error
	// updating is the learner step whose update has begun: an error of
	// that step came out of the collectives alike on every rank.
	updating int
}

// Join makes l rank t.Rank() of t.Size() for epoch (a number every rank
// agrees on, new after every restart) with ZeRO stage l.Config().ZeROStage.
// It checks, over the transport, that every rank holds the same weights
// and step; a rank that does not answer within o.Timeout fails the join.
// Under stage 1 the learner's optimizer state (fresh or loaded) is cut
// down to this rank's slice.
func Join(l *learner.Learner, t Transport, epoch uint64, o Options) (*Rank, error) {
	o = o.withDefaults()
	r := &Rank{l: l, t: t, opt: o, epoch: epoch, stage: l.Config().ZeROStage,
		ring: &ring{t: t, bucket: o.BucketElems, inFlight: o.InFlight, afterSend: testAfterSend}}
	if t.Size() == 1 {
		r.stage = 0
	}
	if err := r.layTensors(); err != nil {
		return nil, err
	}
	if err := r.checkSame(); err != nil {
		return nil, err
	}
	if err := r.share(); err != nil {
		return nil, err
	}
	if r.stage == 1 {
		r.layPieces()
		if err := r.takeOptimizer(); err != nil {
			r.Close()
			return nil, err
		}
	}
	err := l.SetSharding(&learner.Sharding{Rank: t.Rank(), Ranks: t.Size(), Update: r.update, SumStats: r.sumStats, Abort: r.abort,
		GradsReady: r.gradsReady, ParamsChanged: r.paramsChanged, DeviceUpdate: true})
	if err != nil {
		r.Close()
		return nil, err
	}
	return r, nil
}

// Learner is the rank's learner.
func (r *Rank) Learner() *learner.Learner { return r.l }

// Stage is the ZeRO stage in use (0 or 1).
func (r *Rank) Stage() int { return r.stage }

// Err is the error that failed the group, or nil.
func (r *Rank) Err() error { return r.failed }

func (r *Rank) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), r.opt.Timeout)
}

// fail records err, tells the other ranks and returns it wrapped.
func (r *Rank) fail(err error) error {
	if r.failed == nil {
		r.failed = err
		r.t.Abort(r.epoch, err)
	}
	return fmt.Errorf("%w (rank %d of %d, epoch %d): %w", ErrGroupFailed, r.t.Rank(), r.t.Size(), r.epoch, err)
}

// refuse fails the group's epoch with err, the reason this rank cannot
// take part in a step at all (its batch could not be loaded), and tells
// the other ranks, whose collectives end at once.
func (r *Rank) refuse(err error) {
	if r.failed == nil {
		r.failed = err
		r.t.Abort(r.epoch, err)
	}
}

func (r *Rank) nextOp(k uint64) uint64 {
	op := r.op
	r.op += k
	return op
}

// checkSame compares a fingerprint of every rank's weights and step.
func (r *Rank) checkSame() error {
	ctx, cancel := r.ctx()
	defer cancel()
	var sum, wsum float64
	i := 0
	for _, p := range r.l.TrainableParams() {
		for _, v := range p.Data {
			sum += float64(v)
			wsum += float64(v) * float64(i%9973+1)
			i++
		}
	}
	mine := []float64{float64(r.l.Step()), float64(r.total), sum, wsum}
	all, err := r.ring.gather64(ctx, r.epoch, r.nextOp(1), mine)
	if err != nil {
		return r.fail(fmt.Errorf("join: %w", err))
	}
	for k, v := range all {
		if v[0] != mine[0] || v[1] != mine[1] {
			return r.fail(fmt.Errorf("join: %s is at step %v with %v trainable elements, %s at step %v with %v",
				r.t.Peer(k), v[0], v[1], r.t.Peer(r.t.Rank()), mine[0], mine[1]))
		}
		if v[2] != mine[2] || v[3] != mine[3] {
			return r.fail(fmt.Errorf("join: %s holds other weights than %s (same seed or checkpoint on every rank?)", r.t.Peer(k), r.t.Peer(r.t.Rank())))
		}
	}
	return nil
}

// layTensors reads the learner's trainable tensors and lays them out in
// the flat buffer.
func (r *Rank) layTensors() error {
	r.names, r.sizes = r.names[:0], r.sizes[:0]
	for _, p := range r.l.TrainableParams() {
		r.names = append(r.names, p.Name)
		r.sizes = append(r.sizes, len(p.Data))
	}
	if err := r.layOut(r.l.GradGroups()); err != nil {
		return err
	}
	if r.total < r.t.Size() {
		return fmt.Errorf("learner shards: join: %d trainable elements for %d ranks", r.total, r.t.Size())
	}
	r.freeFlat()
	if s := r.ring.shm; s != nil {
		if r.total <= s.floats {
			r.flat = s.bufs[s.rank][:r.total]
			if s.view != nil && len(s.view.data) != r.total {
				// Every rank changes alike; one that cannot map the
				// new view fails the group rather than read its
				// results where the others do not write them.
				s.view.close()
				v, err := s.newView(r.total)
				s.view = v
				if err != nil {
					return fmt.Errorf("learner shards: view of the new layout: %w", err)
				}
			}
			return nil
		}
		// More than the segments hold (on every rank alike): the
		// Transport carries the chunks from now on.
		r.unpinShared()
		s.close()
		r.ring.shm = nil
		r.ring.notShared = fmt.Sprintf("%d trainable elements outgrew the shared buffers of %d", r.total, s.floats)
	}
	r.flat = nil
	if ph, ok := r.l.Model().B.(backend.PinnedHost); ok {
		r.pinned = ph.HostBuffer(r.total)
		r.flat = r.pinned
	}
	if r.flat == nil {
		r.flat = make([]float32, r.total)
	}
	return nil
}

// unpinShared undoes the page-locking of the shared buffer, before it is
// unmapped.
func (r *Rank) unpinShared() {
	if r.registered == nil {
		return
	}
	if ph, ok := r.l.Model().B.(backend.PinnedHost); ok {
		ph.UnpinHostBuffer(r.registered)
	}
	r.registered = nil
}

// freeFlat frees flat where it is the backend's host buffer.
func (r *Rank) freeFlat() {
	if r.pinned == nil {
		return
	}
	if ph, ok := r.l.Model().B.(backend.PinnedHost); ok {
		ph.FreeHostBuffer(r.pinned)
	}
	r.pinned = nil
}

// share sets up buffers shared with the other ranks when all of them are
// on this host (shared.go) and moves flat there.
func (r *Rank) share() error {
	ctx, cancel := r.ctx()
	defer cancel()
	buf, err := r.ring.setupShared(ctx, r.epoch, r.total)
	if err != nil {
		return r.fail(fmt.Errorf("join: %w", err))
	}
	if buf != nil {
		r.freeFlat()
		r.flat = buf[:r.total]
		if ph, ok := r.l.Model().B.(backend.PinnedHost); ok && ph.PinHostBuffer(buf) {
			r.registered = buf
		}
	}
	return nil
}

// result is where this rank reads the last collective's result: its view
// when the ranks read results in place, else flat.
func (r *Rank) result() []float32 {
	if r.ring.viewing() {
		return r.ring.shm.view.data
	}
	return r.flat
}

// testBeforeRead runs before a rank reads a collective's result (tests
// delay a reader here).
var testBeforeRead = func(rank int) {}

// doneReading says this rank has read the result of collective op through
// its view.
func (r *Rank) doneReading(op uint64) {
	if r.ring.viewing() {
		r.ring.shm.release(op)
		r.viewOp, r.viewHeld = op, true
	}
}

// awaitReaders waits, before this rank writes its buffer again, until
// every other rank has read its view of the last collective read that way.
func (r *Rank) awaitReaders() error {
	if r.failed != nil {
		return r.failed
	}
	if !r.viewHeld || r.ring.shm == nil {
		return nil
	}
	r.viewHeld = false
	ctx, cancel := r.ctx()
	defer cancel()
	if err := r.ring.shm.awaitReleased(ctx, Tag{Epoch: r.epoch, Op: r.viewOp}); err != nil {
		_ = r.fail(err) // tells the others; update wraps err once
		return err
	}
	return nil
}

// Shared says whether the rank reduces through buffers shared with the
// other ranks (all on one host) rather than over the Transport.
func (r *Rank) Shared() bool { return r.ring.shm != nil }

// Gradients says how the group's gradients travel: "shared memory" (every
// rank on this host, Shared; and why without views, if so), "none" (one
// rank), or "transport: " and why the ranks could not share buffers (the
// same on every rank).
func (r *Rank) Gradients() string {
	switch {
	case r.ring.shm != nil && r.ring.shm.view == nil && r.ring.noViews != "":
		return "shared memory, results written into every rank's buffer (no views: " + r.ring.noViews + ")"
	case r.ring.shm != nil:
		return "shared memory"
	case r.t.Size() < 2:
		return "none"
	case r.ring.notShared == "":
		return "transport"
	}
	return "transport: " + r.ring.notShared
}

// Close releases the rank's shared buffers once its collectives have
// stopped; the rank trains no more. A rank that is replaced (Restart) or
// whose actor stops is closed.
func (r *Rank) Close() {
	r.drop()
	if r.failed == nil {
		r.failed = errors.New("rank closed")
	}
	if r.ring.shm != nil {
		r.unpinShared()
		r.ring.shm.close()
		r.ring.shm = nil
		r.flat = nil
	}
	if r.pinned != nil {
		r.freeFlat()
		r.flat = nil
	}
}

// paramsChanged is learner.Sharding.ParamsChanged: the learner's
// trainable tensors changed between steps (LoRA adapters started, the
// same on every rank), so the ring carries only theirs from now on (under
// LoRA, only the adapters' gradients are reduced) and ZeRO-1 slices the
// learner's fresh optimizer state again. No collective is needed: every
// rank changes alike.
func (r *Rank) paramsChanged() error {
	r.drop()
	if err := r.layTensors(); err != nil {
		return r.fail(err)
	}
	if r.stage == 1 {
		r.layPieces()
		if err := r.takeOptimizer(); err != nil {
			return r.fail(err)
		}
	}
	return nil
}

// layOut places the trainable tensors in the flat buffer in the order the
// backward pass finishes their gradients (groups, from
// learner.GradGroups), so the first buckets can be reduced while backward
// is still at the earlier layers.
func (r *Rank) layOut(groups [][]int) error {
	n := len(r.names)
	r.offs = make([]int, n)
	seen := make([]bool, n)
	r.order, r.total = r.order[:0], 0
	for _, g := range groups {
		for _, i := range g {
			if i < 0 || i >= n || seen[i] {
				return fmt.Errorf("learner shards: join: gradient groups name tensor %d twice or out of [0, %d)", i, n)
			}
			seen[i] = true
			r.order = append(r.order, i)
			r.offs[i] = r.total
			r.total += r.sizes[i]
		}
	}
	if len(r.order) != n {
		return fmt.Errorf("learner shards: join: gradient groups cover %d of %d trainable tensors", len(r.order), n)
	}
	return nil
}

// layPieces cuts this rank's owned flat ranges at tensor boundaries.
func (r *Rank) layPieces() {
	r.pieces = r.pieces[:0]
	for _, rg := range r.ring.owned(r.total, r.t.Rank()) {
		lo := rg[0]
		for lo < rg[1] {
			j := sort.Search(len(r.order), func(j int) bool { return r.offs[r.order[j]] > lo }) - 1
			ti := r.order[j]
			hi := min(rg[1], r.offs[ti]+r.sizes[ti])
			tlo, thi := lo-r.offs[ti], hi-r.offs[ti]
			r.pieces = append(r.pieces, piece{ti: ti, lo: tlo, hi: thi, off: lo, name: fmt.Sprintf("%s[%d:%d]", r.names[ti], tlo, thi)})
			lo = hi
		}
	}
	r.slices, r.spans = r.slices[:0], r.spans[:0]
	for _, p := range r.pieces {
		r.slices = append(r.slices, model.Slice{Param: p.ti, Lo: p.lo, Hi: p.hi, Name: p.name})
		r.spans = append(r.spans, r.flat[p.off:p.off+p.hi-p.lo])
	}
}

// takeOptimizer moves this rank's slice of the learner's AdamW state into
// the ZeRO-1 optimizer and empties the learner's.
func (r *Rank) takeOptimizer() error {
	c := r.l.Config()
	full := r.l.Optimizer().State()
	byName := map[string][]float32{}
	for _, t := range full.Tensors {
		byName[t.Name] = t.Data
	}
	st := optim.AdamWState{Step: full.Step}
	params := make([]*optim.Param, len(r.pieces))
	for i, p := range r.pieces {
		n := p.hi - p.lo
		params[i] = &optim.Param{Name: p.name, Data: make([]float32, n), Grad: make([]float32, n)}
		if len(full.Tensors) == 0 {
			continue
		}
		for _, prefix := range []string{optim.ExpAvgPrefix, optim.ExpAvgSqPrefix} {
			v, ok := byName[prefix+r.names[p.ti]]
			if !ok {
				return fmt.Errorf("learner shards: rank %d: optimizer state has no %q", r.t.Rank(), prefix+r.names[p.ti])
			}
			st.Tensors = append(st.Tensors, optim.Tensor{Name: prefix + p.name, Data: v[p.lo:p.hi]})
		}
	}
	z := optim.NewAdamW(c.Beta1, c.Beta2, c.Eps, c.WeightDecay)
	if err := z.LoadState(params, st); err != nil {
		return fmt.Errorf("learner shards: rank %d: %w", r.t.Rank(), err)
	}
	if err := r.l.Optimizer().LoadState(nil, optim.AdamWState{}); err != nil {
		return err
	}
	r.zopt = z
	return nil
}

// sumStats is learner.Sharding.SumStats.
func (r *Rank) sumStats(v []float64) error {
	if r.failed != nil {
		return fmt.Errorf("%w: %v", ErrGroupFailed, r.failed)
	}
	ctx, cancel := r.ctx()
	defer cancel()
	if err := r.ring.sum64(ctx, r.epoch, r.nextOp(1), v); err != nil {
		return r.fail(err)
	}
	return nil
}

// abort is learner.Sharding.Abort: a step that failed on this rank alone
// fails the group.
func (r *Rank) abort(step int, err error) {
	if r.updating != step {
		_ = r.fail(fmt.Errorf("step %d failed on %s: %w", step, r.t.Peer(r.t.Rank()), err))
	}
	r.drop()
}

// update is learner.Sharding.Update.
func (r *Rank) update(_ int, params []*optim.Param, lr float64) (float64, error) {
	// The learner's step count (its Abort's numbering), not the trainer's,
	// which restarts at 0 after a Load.
	r.updating = r.l.Step() + 1
	if r.failed != nil {
		r.drop()
		return 0, fmt.Errorf("%w: %v", ErrGroupFailed, r.failed)
	}
	if len(params) != len(r.names) {
		r.drop()
		return 0, fmt.Errorf("learner shards: %d trainable tensors, joined with %d", len(params), len(r.names))
	}
	if err := r.finish(params); err != nil {
		return 0, r.fail(fmt.Errorf("gradients: %w", err))
	}
	if r.stage == 0 {
		return r.updateReplicated(params, lr)
	}
	return r.updateZeRO1(params, lr)
}

// updateReplicated steps AdamW on every rank with the all-reduced
// gradients in flat.
func (r *Rank) updateReplicated(params []*optim.Param, lr float64) (float64, error) {
	testBeforeRead(r.t.Rank())
	src := r.result()
	for i, p := range params {
		copy(p.Grad, src[r.offs[i]:r.offs[i]+len(p.Grad)])
	}
	r.doneReading(r.reduceOp)
	// Every rank now holds the same gradients, so the checks below come
	// out the same everywhere.
	if norm, ok, err := r.l.StepOnDevice(params, lr); ok {
		// On a GPU: the same check, clip and AdamW on the device.
		if err != nil {
			err = r.deviceFailed(err)
		}
		return norm, err
	}
	if err := optim.CheckFinite(params); err != nil {
		return 0, err
	}
	c := r.l.Config()
	var norm float64
	if c.MaxGradNorm > 0 {
		norm = optim.ClipGradNorm(params, c.MaxGradNorm)
	} else {
		for _, p := range params {
			for _, g := range p.Grad {
				norm += float64(g) * float64(g)
			}
		}
		norm = math.Sqrt(norm)
	}
	return norm, r.l.Optimizer().Step(params, lr)
}

// updateZeRO1 steps AdamW on this rank's slice of the reduce-scattered
// gradients in flat and all-gathers the weights.
func (r *Rank) updateZeRO1(params []*optim.Param, lr float64) (float64, error) {
	// Global norm and non-finite check from every rank's owned slice.
	size := r.t.Size()
	v := make([]float64, 1+size)
	var bad error
	for _, p := range r.pieces {
		for i, g := range r.flat[p.off : p.off+p.hi-p.lo] {
			if g-g != 0 && bad == nil {
				bad = fmt.Errorf("gradient of %q: %v at index %d", r.names[p.ti], g, p.lo+i)
			}
			v[0] += float64(g) * float64(g)
		}
	}
	if bad != nil {
		v[1+r.t.Rank()] = 1
		v[0] = 0
	}
	ctx, cancel := r.ctx()
	err := r.ring.sum64(ctx, r.epoch, r.nextOp(1), v)
	cancel()
	if err != nil {
		return 0, r.fail(fmt.Errorf("gradient norm: %w", err))
	}
	if bad != nil {
		return 0, bad
	}
	for k := range size {
		if v[1+k] != 0 {
			return 0, fmt.Errorf("non-finite gradient on %s", r.t.Peer(k))
		}
	}
	norm := math.Sqrt(v[0])
	c := r.l.Config()
	scale := float32(1)
	if c.MaxGradNorm > 0 {
		// As optim.ClipGradNorm, from the global norm.
		if coef := c.MaxGradNorm / (norm + 1e-6); coef < 1 {
			scale = float32(coef)
		}
	}
	// On a GPU: the slices' update on the device, their weights back in
	// flat.
	onDevice, err := r.l.StepSlicesOnDevice(r.zopt, r.slices, r.spans, r.spans, scale, lr)
	if err != nil {
		return norm, r.deviceFailed(err)
	}
	if !onDevice {
		if scale != 1 {
			for _, p := range r.pieces {
				g := r.flat[p.off : p.off+p.hi-p.lo]
				for i := range g {
					g[i] *= scale
				}
			}
		}
		ps := make([]*optim.Param, len(r.pieces))
		for i, p := range r.pieces {
			ps[i] = &optim.Param{Name: p.name, Data: params[p.ti].Data[p.lo:p.hi], Grad: r.flat[p.off : p.off+p.hi-p.lo]}
		}
		if err := r.zopt.Step(ps, lr); err != nil {
			return norm, err
		}
		for _, p := range r.pieces {
			copy(r.flat[p.off:], params[p.ti].Data[p.lo:p.hi])
		}
	}
	// Spread the updated slices: the flat buffer now carries weights.
	ctx, cancel = r.ctx()
	op := r.nextOp(1)
	if r.ring.viewing() {
		err = r.ring.allGatherToView(ctx, r.epoch, op, r.flat)
	} else {
		err = r.ring.allGather(ctx, r.epoch, op, r.flat)
	}
	cancel()
	if err != nil {
		return norm, r.fail(fmt.Errorf("weights: %w", err))
	}
	testBeforeRead(r.t.Rank())
	src := r.result()
	for i, p := range params {
		copy(p.Data, src[r.offs[i]:r.offs[i]+len(p.Data)])
	}
	r.doneReading(op)
	return norm, nil
}

// deviceFailed is err from an update on the device: where the device
// itself failed (its backend keeps an error) this rank's weights are lost,
// so the group fails; otherwise (the optimizer's own checks, alike on
// every rank) err stands.
func (r *Rank) deviceFailed(err error) error {
	if e, ok := r.l.Model().B.(interface{ Err() error }); ok && e.Err() != nil {
		return r.fail(fmt.Errorf("update on %s: %w", r.t.Peer(r.t.Rank()), err))
	}
	return err
}

// Save writes the group's checkpoint share of this rank into dir (the
// checkpoint directory where the rank's node sees it, else the rank's
// staging folder: learner.Folders).
// Stage 0: rank 0 writes an unsharded checkpoint (learner.Save). Stage 1:
// rank 0 writes weights, reference and learner_state.json, and every rank
// its optimizer shard (learner.ShardOptimizerFile); with
// learner.Config.OmitOptimizer rank 0 writes all there is. The checkpoint is whole
// once every rank's Save has returned; it loads with any shard count.
func (r *Rank) Save(dir string) error { return r.SaveContext(context.Background(), dir) }

// SaveContext is Save that gives up once ctx is done, with an error
// wrapping ctx's (learner.Learner.SaveContext).
func (r *Rank) SaveContext(ctx context.Context, dir string) error {
	if r.failed != nil {
		return fmt.Errorf("learner shards: save %s: %w: %v", dir, ErrGroupFailed, r.failed)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("learner shards: save: %w", err)
	}
	rank := r.t.Rank()
	if r.stage == 0 || r.l.Config().OmitOptimizer {
		// Without optimizer state a ZeRO-1 rank has nothing of its own to
		// write either.
		if rank == 0 {
			return r.l.SaveContext(ctx, dir)
		}
		return nil
	}
	if err := r.l.SyncSlices(r.zopt); err != nil {
		return fmt.Errorf("learner shards: save: rank %d: %w", rank, err)
	}
	var parts []learner.OptimizerPart
	st := r.zopt.State()
	byName := map[string][]float32{}
	for _, t := range st.Tensors {
		byName[t.Name] = t.Data
	}
	for _, p := range r.pieces {
		if len(parts) == 0 || parts[len(parts)-1].Name != r.names[p.ti] {
			parts = append(parts, learner.OptimizerPart{Name: r.names[p.ti]})
		}
		q := &parts[len(parts)-1]
		q.Ranges = append(q.Ranges, [2]int{p.lo, p.hi})
		avg, sq := byName[optim.ExpAvgPrefix+p.name], byName[optim.ExpAvgSqPrefix+p.name]
		if avg == nil {
			// Not stepped yet: zero moments.
			avg, sq = make([]float32, p.hi-p.lo), make([]float32, p.hi-p.lo)
		}
		q.ExpAvg = append(q.ExpAvg, avg...)
		q.ExpAvgSq = append(q.ExpAvgSq, sq...)
	}
	if err := learner.WriteOptimizerShard(dir, rank, r.t.Size(), r.zopt.StepCount(), parts); err != nil {
		return fmt.Errorf("learner shards: save: rank %d: %w", rank, err)
	}
	if rank == 0 {
		return r.l.SaveModelContext(ctx, dir)
	}
	return nil
}

// Restart loads the checkpoint in dir (written by any shard count, or by
// an unsharded learner) into this rank's learner and joins it to the group
// of t under a new epoch; the Rank r is done with. Every rank of the new
// group must restart from the same checkpoint.
func Restart(l *learner.Learner, t Transport, epoch uint64, o Options, dir string) (*Rank, error) {
	return RestartContext(context.Background(), l, t, epoch, o, dir)
}

// RestartContext is Restart that gives up loading the checkpoint once ctx
// is done (learner.Learner.LoadContext), with an error wrapping ctx's.
func RestartContext(ctx context.Context, l *learner.Learner, t Transport, epoch uint64, o Options, dir string) (*Rank, error) {
	if err := l.SetSharding(nil); err != nil {
		return nil, err
	}
	if dir != "" {
		if err := l.LoadContext(ctx, dir); err != nil {
			return nil, fmt.Errorf("learner shards: restart rank %d: %w", t.Rank(), err)
		}
	}
	return Join(l, t, epoch, o)
}
