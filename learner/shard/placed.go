package shard

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/rlnode/rlnode/actor"
	"github.com/rlnode/rlnode/cluster"
	"github.com/rlnode/rlnode/learner"
)

// GroupConfig says what a PlacedGroup runs and what each member holds.
type GroupConfig struct {
	// Policy names the learner in actor names and errors ("solver").
	Policy string
	// Actor is every member's spawn argument. Actor.Config.Shards is the
	// number of ranks: with 2 or more they are learner-shard ranks
	// (ActorKind), otherwise the group is one learner actor
	// (learner.ActorKind).
	Actor learner.ActorConfig
	// Resources is what each member holds (default 1 CPU).
	Resources cluster.Resources
	// Options are the ranks' collective settings (Options.Timeout bounds
	// how long a lost rank takes to fail a step).
	Options Options
	// Pulled, when set, is called as the parts of a checkpoint that
	// members on hosts without the run folder staged arrive (Save): the
	// member and its node, the file and how many of its bytes are here.
	Pulled func(rank int, node string, f learner.FolderFile, got int64)
	// PullChunk is how many bytes of a staged file are asked for at once
	// (0: learner.FolderChunk).
	PullChunk int64
}

// Failure is an error of a learner call (train, save, weights, set
// algorithm): the caller may recover by Restart. Every error those
// methods of PlacedGroup return is a *Failure.
type Failure struct {
	Policy, Op string
	Err        error
	// Answered: the call reached every member and each answered it with
	// an error of its own (not that it is stopping, not a collective that
	// failed or timed out between ranks) or with an abort that echoes such
	// an answer; none was lost or silent. That is the learner's own
	// verdict on the call (a batch it refuses, a non-finite loss, a full
	// disk at a save) that a restart from a checkpoint would meet again.
	Answered bool
}

func (e *Failure) Error() string {
	return fmt.Sprintf("%s learner: %s: %v", e.Policy, e.Op, e.Err)
}

func (e *Failure) Unwrap() error { return e.Err }

// Member is one actor of a PlacedGroup as it stands.
type Member struct {
	Name string
	Node string
}

// PlacedGroup is one policy's learner on the cluster: a learner actor, or
// a data-parallel Group of learner-shard ranks, one per bundle of a SPREAD
// placement group (so on a cluster they spread over the nodes that have
// room). Restart replaces the members that are lost, placing a rank anew
// when its bundle's node is gone, and brings the learner back to a
// checkpoint. Methods must be called from one goroutine at a time.
type PlacedGroup struct {
	node   *cluster.Node
	cfg    GroupConfig
	base   string // rank actors are base-r<rank>.<spawn>
	spawns int
	pgs    []*cluster.PlacementGroup // the first holds the ranks as placed; later ones replacements
	ranks  []placedRank              // one for a single learner actor
	g      *Group                    // nil for a single learner actor
}

// placedRank is one member actor and the bundle it holds (none for a
// single learner actor).
type placedRank struct {
	h      *cluster.Handle
	ref    actor.Ref
	pg     *cluster.PlacementGroup
	bundle int
}

// StartGroup places cfg's learner on node's cluster and, for ranks, joins
// them as a Group. A member that cannot be placed stops the others and
// fails the call, naming what was missing.
func StartGroup(ctx context.Context, node *cluster.Node, cfg GroupConfig) (*PlacedGroup, error) {
	if cfg.Resources == nil {
		cfg.Resources = cluster.Resources{cluster.CPU: 1}
	}
	var raw [4]byte
	_, _ = rand.Read(raw[:])
	p := &PlacedGroup{node: node, cfg: cfg, base: "learner-" + cfg.Policy + "-" + hex.EncodeToString(raw[:])}
	n := cfg.Actor.Config.Shards
	if n <= 1 {
		h, err := node.Spawn(ctx, learner.ActorKind, cluster.SpawnOptions{Args: cfg.Actor, Resources: cfg.Resources})
		if err != nil {
			return nil, fmt.Errorf("place the %s learner: %w", cfg.Policy, err)
		}
		p.ranks = []placedRank{{h: h}}
		return p, nil
	}
	bundles := make([]cluster.Bundle, n)
	for i := range bundles {
		bundles[i] = cluster.Bundle{Resources: cfg.Resources}
	}
	pg, err := node.CreatePlacementGroup(ctx, bundles, cluster.Spread)
	if err != nil {
		return nil, fmt.Errorf("%d %s learner shards of %s each: %w", n, cfg.Policy, cfg.Resources, err)
	}
	p.pgs = append(p.pgs, pg)
	p.ranks = make([]placedRank, n)
	for i := range p.ranks {
		if p.ranks[i], err = p.spawnRank(ctx, i, pg, i); err != nil {
			p.Stop()
			return nil, err
		}
	}
	if p.g, err = NewGroup(ctx, node.System(), p.refs(), cfg.Options); err != nil {
		p.Stop()
		return nil, fmt.Errorf("join the %s learner's %d shards: %w", cfg.Policy, n, err)
	}
	return p, nil
}

func (p *PlacedGroup) fail(op string, err error) error {
	answered := ownAnswer(err)
	if p.g != nil {
		// The group's fan-out sums its ranks' errors up in text; it
		// kept whether each was the rank's own answer.
		answered = p.g.answered != nil && err == p.g.answered
	}
	return &Failure{Policy: p.cfg.Policy, Op: op, Err: err, Answered: answered}
}

func (p *PlacedGroup) refs() []actor.Ref {
	out := make([]actor.Ref, len(p.ranks))
	for i, r := range p.ranks {
		out[i] = r.ref
	}
	return out
}

// Gradients says how the ranks' gradients travel (Group.Gradients); empty
// for a single learner actor.
func (p *PlacedGroup) Gradients() string {
	if p.g == nil {
		return ""
	}
	return p.g.Gradients()
}

// Resources are what each member holds (GroupConfig.Resources).
func (p *PlacedGroup) Resources() cluster.Resources { return p.cfg.Resources }

// Members are the member actors, by rank.
func (p *PlacedGroup) Members() []Member {
	out := make([]Member, len(p.ranks))
	for i, r := range p.ranks {
		out[i].Name = r.h.Name()
		if rec, ok := r.h.Record(); ok {
			out[i].Node = rec.Node
		}
	}
	return out
}

// spawnRank starts rank i's actor in bundle b of pg, with the initial
// spawn arguments. The bundle of a rank that was just stopped is released
// when its node sees the actor end, so a refusal is retried for a while,
// as long as that node is a member.
func (p *PlacedGroup) spawnRank(ctx context.Context, i int, pg *cluster.PlacementGroup, b int) (placedRank, error) {
	p.spawns++
	name := fmt.Sprintf("%s-r%d.%d", p.base, i, p.spawns)
	deadline := time.Now().Add(10 * time.Second)
	for {
		args := p.cfg.Actor
		if p.cfg.Resources[cluster.GPU] == 0 {
			// Ranks that hold no GPU resource get no device from their
			// node's ledger: those on one node count theirs off in bundle
			// order. (A rank that holds GPUs opens its ledger's device:
			// cluster.DeviceFor in the rank's factory.)
			args.Config.Device = deviceOnNode(args.Config.Device, pg.Nodes, b)
		}
		h, err := p.node.Spawn(ctx, ActorKind, cluster.SpawnOptions{Name: name, Args: args, Resources: p.cfg.Resources, Group: pg, Bundle: b})
		if err == nil {
			rec, ok := h.Record()
			if !ok || rec.Ref.IsZero() {
				return placedRank{}, fmt.Errorf("place %s learner shard %d: no directory record for %s", p.cfg.Policy, i, name)
			}
			return placedRank{h: h, ref: rec.Ref, pg: pg, bundle: b}, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil || !p.member(pg.Nodes[b]) {
			return placedRank{}, fmt.Errorf("place %s learner shard %d (placement group %s bundle %d on node %s): %w", p.cfg.Policy, i, pg.ID, b, pg.Nodes[b], err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// member says whether node is an alive member of the cluster.
func (p *PlacedGroup) member(node string) bool {
	for _, v := range p.node.Views() {
		if v.ID == node {
			return true
		}
	}
	return false
}

// Train runs one training step on the batch.
func (p *PlacedGroup) Train(ctx context.Context, b learner.Batch) (learner.Stats, error) {
	var st learner.Stats
	var err error
	if p.g != nil {
		st, err = p.g.Train(ctx, b)
	} else {
		st, err = p.trainActor(ctx, b)
	}
	if err != nil {
		return st, p.fail("train", err)
	}
	return st, nil
}

// trainActor trains the single learner actor on b, sent to it as
// learner.PrepareTrain says.
func (p *PlacedGroup) trainActor(ctx context.Context, b learner.Batch) (learner.Stats, error) {
	rec, ok := p.ranks[0].h.Record()
	if !ok || rec.State != cluster.Alive {
		return cluster.Call[learner.Stats](ctx, p.ranks[0].h, learner.TrainRequest{Batch: b}) // fails as the handle does
	}
	reqs, release, err := learner.PrepareTrain(p.node.System(), b, []actor.Ref{rec.Ref})
	if err != nil {
		return learner.Stats{}, err
	}
	defer release()
	return cluster.Call[learner.Stats](ctx, p.ranks[0].h, reqs[0])
}

// SetAlgorithm switches the RL algorithm (and the peak rate when lr > 0).
func (p *PlacedGroup) SetAlgorithm(ctx context.Context, name string, lr float64) error {
	var err error
	if p.g != nil {
		err = p.g.SetAlgorithm(ctx, name, lr)
	} else {
		_, err = cluster.Call[learner.AlgorithmSet](ctx, p.ranks[0].h, learner.SetAlgorithmRequest{Algorithm: name, LR: lr})
	}
	if err != nil {
		return p.fail("set algorithm "+name, err)
	}
	return nil
}

// Weights offers the policy's weights on the bulk path.
func (p *PlacedGroup) Weights(ctx context.Context, req learner.WeightsRequest) (learner.WeightsOffer, error) {
	var off learner.WeightsOffer
	var err error
	if p.g != nil {
		off, err = p.g.Weights(ctx, req)
	} else {
		off, err = cluster.Call[learner.WeightsOffer](ctx, p.ranks[0].h, req)
	}
	if err != nil {
		return off, p.fail("weights", err)
	}
	return off, nil
}

// Save writes a checkpoint to dir (ranks: one optimizer file each). A
// member whose node does not see dir's folder (learner.Folders) saves
// its part into a staging folder of its own, and Save pulls it into dir
// here, checking each file's size and SHA-256 against what the member
// says it wrote, before the member removes its copy. A pull that fails
// (the member lost mid-transfer, bytes that do not match) is a Failure
// the caller may restart from, and leaves no partial file in dir.
func (p *PlacedGroup) Save(ctx context.Context, dir string) (learner.Saved, error) {
	var saves []learner.Saved
	var err error
	if p.g != nil {
		saves, err = p.g.saveAll(ctx, dir)
	} else {
		var sv learner.Saved
		sv, err = cluster.Call[learner.Saved](ctx, p.ranks[0].h, learner.SaveRequest{Dir: dir})
		saves = []learner.Saved{sv}
	}
	if err != nil {
		return learner.Saved{}, p.fail("save "+dir, err)
	}
	for i, sv := range saves {
		if sv.Staged == nil {
			continue
		}
		if err := p.pull(ctx, i, dir, *sv.Staged); err != nil {
			// Not the member's own answer: the caller restarts.
			return learner.Saved{}, &Failure{Policy: p.cfg.Policy, Op: "save " + dir, Err: err}
		}
	}
	out := saves[0]
	out.Staged = nil
	return out, nil
}

// pull fetches the part of a checkpoint that member i staged (m) into
// dir, then tells the member to remove its copy.
func (p *PlacedGroup) pull(ctx context.Context, i int, dir string, m learner.FolderManifest) error {
	who := p.memberName(i)
	h := p.ranks[i].h
	node := ""
	if rec, ok := h.Record(); ok {
		node = rec.Node
	}
	from := func(ctx context.Context, msg any) (any, error) { return h.Call(ctx, msg) }
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("pull the checkpoint part of %s: %w", who, err)
	}
	var fetched func(learner.FolderFile, int64)
	if p.cfg.Pulled != nil {
		fetched = func(f learner.FolderFile, got int64) { p.cfg.Pulled(i, node, f, got) }
	}
	err := learner.FetchFolder(ctx, p.node.System(), from, m, dir, learner.FetchOptions{Chunk: p.cfg.PullChunk, Fetched: fetched})
	if err != nil {
		return fmt.Errorf("pull %s's part of checkpoint %s from its node (which does not see the run folder): %w", who, dir, err)
	}
	// The checkpoint is whole here; a member that does not answer drops
	// its copy at its next save, or when it stops.
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	_, _ = h.Call(dctx, learner.StagedDoneRequest{Dir: m.Dir})
	return nil
}

// memberName names member i in errors.
func (p *PlacedGroup) memberName(i int) string {
	where := ""
	if rec, ok := p.ranks[i].h.Record(); ok {
		where = " on node " + rec.Node
	}
	if p.g == nil {
		return fmt.Sprintf("the %s learner%s", p.cfg.Policy, where)
	}
	return fmt.Sprintf("rank %d of the %s learner%s", i, p.cfg.Policy, where)
}

// RankListing is one member's answer to a learner.ListRequest, or why it
// gave none.
type RankListing struct {
	Rank   int
	Listed learner.Listed
	Err    error
}

// List asks every member which entries its node sees in dir, all at once
// (learner.ListRequest). An error is the member's; the group stays as it is.
func (p *PlacedGroup) List(ctx context.Context, dir string) []RankListing {
	out := make([]RankListing, len(p.ranks))
	var wg sync.WaitGroup
	for i, r := range p.ranks {
		wg.Go(func() {
			l, err := cluster.Call[learner.Listed](ctx, r.h, learner.ListRequest{Dir: dir})
			out[i] = RankListing{Rank: i, Listed: l, Err: err}
		})
	}
	wg.Wait()
	return out
}

// probeTimeout bounds the question "are you there?" to a rank after a
// failed step; a rank that cannot answer it is replaced.
const probeTimeout = 5 * time.Second

// Restart brings the learner back to the checkpoint in dir, or with dir
// "" to how it was first placed (GroupConfig.Actor: the initial weights or
// its ResumeDir).
//
// A single learner actor is replaced by a fresh one that loads dir:
// cheaper to reason about than asking a possibly wedged actor to load.
// Ranks that are gone (those the failed step found lost, and any that do
// not answer a probe now) are respawned in their bundle, or in a new
// placement group when the bundle's node is gone; then survivors and new
// ranks join as the group's next epoch from dir (Group.Restart: any shard
// count wrote it). Without a checkpoint every rank is replaced and a new
// group starts.
func (p *PlacedGroup) Restart(ctx context.Context, dir string) error {
	if p.g == nil {
		return p.restartActor(ctx, dir)
	}
	var lost []int
	known := map[int]bool{}
	for _, i := range p.g.Lost() {
		known[i] = true
	}
	for i, rk := range p.ranks {
		if dir == "" || known[i] {
			lost = append(lost, i)
			continue
		}
		pctx, cancel := context.WithTimeout(ctx, probeTimeout)
		_, err := actor.CallAs[MailboxRef](pctx, p.node.System(), rk.ref, MailboxRequest{})
		cancel()
		if err != nil {
			lost = append(lost, i)
		}
	}
	for _, i := range lost {
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_ = p.ranks[i].h.Stop(sctx) // may be gone, or on a lost node
		cancel()
	}
	var extra *cluster.PlacementGroup
	for k, i := range lost {
		old := p.ranks[i]
		rk, err := p.spawnRank(ctx, i, old.pg, old.bundle)
		if err != nil {
			// The bundle's node is gone: place the rank anew.
			if extra == nil {
				bundles := make([]cluster.Bundle, len(lost))
				for b := range bundles {
					bundles[b] = cluster.Bundle{Resources: p.cfg.Resources}
				}
				var perr error
				if extra, perr = p.node.CreatePlacementGroup(ctx, bundles, cluster.Spread); perr != nil {
					return fmt.Errorf("respawn %s learner shard %d: %v; a new placement group: %w", p.cfg.Policy, i, err, perr)
				}
				p.pgs = append(p.pgs, extra)
			}
			if rk, err = p.spawnRank(ctx, i, extra, k); err != nil {
				return err
			}
		}
		p.ranks[i] = rk
	}
	if dir == "" {
		g, err := NewGroup(ctx, p.node.System(), p.refs(), p.cfg.Options)
		if err != nil {
			return fmt.Errorf("rejoin the %s learner's %d shards: %w", p.cfg.Policy, len(p.ranks), err)
		}
		p.g = g
		return nil
	}
	if err := p.g.Restart(ctx, p.refs(), dir); err != nil {
		return fmt.Errorf("restart the %s learner's %d shards from %s: %w", p.cfg.Policy, len(p.ranks), dir, err)
	}
	return nil
}

func (p *PlacedGroup) restartActor(ctx context.Context, dir string) error {
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	_ = p.ranks[0].h.Stop(sctx) // it may be gone already
	cancel()
	args := p.cfg.Actor
	if dir != "" {
		args.ResumeDir = dir
	}
	h, err := p.node.Spawn(ctx, learner.ActorKind, cluster.SpawnOptions{Args: args, Resources: p.cfg.Resources})
	if err != nil {
		return fmt.Errorf("restart the %s learner from %q: %w", p.cfg.Policy, dir, err)
	}
	p.ranks[0] = placedRank{h: h}
	return nil
}

// Stop stops every member, at once and each within 10 s, and then
// removes the placement groups (within 30 s more). A member's node that
// does not answer costs only its own stop: one after another within one
// budget, it used up the others' time, and they and the groups' releases
// were reported as their nodes not answering.
func (p *PlacedGroup) Stop() {
	var names []string
	for _, rk := range p.ranks {
		if rk.h != nil {
			names = append(names, rk.h.Name())
		}
	}
	_ = p.node.StopActors(context.Background(), 10*time.Second, names...)
	rctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, pg := range p.pgs {
		_ = p.node.RemovePlacementGroup(rctx, pg.ID)
	}
}

// deviceOnNode is the learner device of the shard in bundle b when the
// bundles are placed on nodes: a cuda device without an index becomes
// cuda:k on a node that holds several shards, k counting that node's
// shards in bundle order, so each takes its own GPU; anything else stays.
func deviceOnNode(device string, nodes []string, b int) string {
	if b < 0 || b >= len(nodes) || (device != "cuda" && device != "cuda-bf16") {
		return device
	}
	k, n := 0, 0
	for j, node := range nodes {
		if node != nodes[b] {
			continue
		}
		if j < b {
			k++
		}
		n++
	}
	if n < 2 {
		return device
	}
	return fmt.Sprintf("%s:%d", device, k)
}
