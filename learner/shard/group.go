package shard

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/rlnode/rlnode/actor"
	"github.com/rlnode/rlnode/learner"
)

// Group is the driver's handle on a data-parallel learner group: rank
// actors of ActorKind, already spawned (on any nodes) with the same
// learner.ActorConfig. It sends every Train and Save to all ranks at once
// and reports rank 0's answer (all ranks report the same statistics).
// After a failed step the group trains no more; Restart joins a new set of
// rank actors (the survivors plus respawned ones, any count) from the last
// checkpoint. A Group is not safe for concurrent use.
type Group struct {
	sys       *actor.System
	ranks     []actor.Ref
	mailboxes []actor.Ref // of ranks, by rank
	opt       Options
	epoch     uint64
	failed    error
	lost      []int  // ranks the last failed call found gone or silent
	answered  error  // the last failed fan-out's error when its ranks answered it (ownAnswer) or echoed such an answer, none lost
	gradients string // rank 0's Joined.Gradients
}

// NewGroup joins ranks into one group (rank i is ranks[i]).
func NewGroup(ctx context.Context, sys *actor.System, ranks []actor.Ref, o Options) (*Group, error) {
	g := &Group{sys: sys, opt: o.withDefaults()}
	if err := g.join(ctx, ranks, ""); err != nil {
		return nil, err
	}
	return g, nil
}

// Ranks are the rank actors, by rank.
func (g *Group) Ranks() []actor.Ref { return append([]actor.Ref(nil), g.ranks...) }

// Lost are the ranks (indexes into Ranks) that the last failed call found
// gone (actor stopped, node lost) or silent past the grace period: the ones
// to respawn before Restart. Others may be gone too without having shown
// it; a caller probes them.
func (g *Group) Lost() []int { return append([]int(nil), g.lost...) }

// Epoch is the group's current epoch (1 after NewGroup, +1 per Restart).
func (g *Group) Epoch() uint64 { return g.epoch }

// Restart joins ranks (any number; survivors of the failed group and
// respawned actors) as a new epoch of the group, every rank loading the
// checkpoint in dir first: a checkpoint written by any shard count.
func (g *Group) Restart(ctx context.Context, ranks []actor.Ref, dir string) error {
	if dir == "" {
		return fmt.Errorf("learner shards: restart: no checkpoint directory")
	}
	return g.join(ctx, ranks, dir)
}

func (g *Group) join(ctx context.Context, ranks []actor.Ref, dir string) error {
	if len(ranks) == 0 {
		return fmt.Errorf("learner shards: group of no ranks")
	}
	seen := map[actor.Ref]int{}
	for i, r := range ranks {
		if r.IsZero() {
			return fmt.Errorf("learner shards: rank %d has an empty actor ref", i)
		}
		if j, dup := seen[r]; dup {
			return fmt.Errorf("learner shards: rank %d is rank %d's actor %s again", i, j, r)
		}
		seen[r] = i
	}
	g.epoch++
	g.failed = fmt.Errorf("joining epoch %d", g.epoch)
	mailboxes := make([]actor.Ref, len(ranks))
	_, err := g.fanOut(ctx, ranks, "mailbox", func(int) any { return MailboxRequest{} }, func(i int, reply any) error {
		m, ok := reply.(MailboxRef)
		if !ok {
			return fmt.Errorf("reply %T, want MailboxRef", reply)
		}
		mailboxes[i] = m.Ref
		return nil
	})
	if err != nil {
		return err
	}
	replies, err := g.fanOut(ctx, ranks, "join", func(i int) any {
		return JoinRequest{Epoch: g.epoch, Rank: i, Peers: mailboxes, Options: g.opt, ResumeDir: dir}
	}, nil)
	if err != nil {
		return err
	}
	g.gradients = ""
	if j, ok := replies[0].(Joined); ok {
		g.gradients = j.Gradients
	}
	g.ranks, g.mailboxes, g.failed, g.lost = append([]actor.Ref(nil), ranks...), mailboxes, nil, nil
	return nil
}

// Gradients says how the ranks' gradients travel, as rank 0 said at the
// last join (Rank.Gradients).
func (g *Group) Gradients() string { return g.gradients }

// Train runs one Train on every rank with the whole batch (each trains on
// its slice) and returns the batch's statistics. A rank that dies or
// stalls fails the step on every rank within the collective timeout; the
// error names the rank and its node.
func (g *Group) Train(ctx context.Context, b learner.Batch) (learner.Stats, error) {
	if g.failed != nil {
		return learner.Stats{}, fmt.Errorf("learner shards: train: %w: %v", ErrGroupFailed, g.failed)
	}
	// Encoded at most once, and offered once for all the ranks on other
	// nodes, before any rank is called: a batch that cannot be sent
	// reaches none.
	reqs, release, err := learner.PrepareTrain(g.sys, b, g.ranks)
	if err != nil {
		// Nothing was sent; the same batch would fail the same way.
		g.answered = fmt.Errorf("learner shards: train (epoch %d): %w", g.epoch, err)
		return learner.Stats{}, g.answered
	}
	defer release()
	replies, err := g.fanOut(ctx, g.ranks, "train", func(i int) any { return reqs[i] }, nil)
	if err != nil {
		g.failed = err
		return learner.Stats{}, err
	}
	st, ok := replies[0].(learner.Stats)
	if !ok {
		return learner.Stats{}, fmt.Errorf("learner shards: train: rank 0 replied %T", replies[0])
	}
	return st, nil
}

// Save writes a checkpoint of the group to dir (reachable by every rank).
func (g *Group) Save(ctx context.Context, dir string) (learner.Saved, error) {
	all, err := g.saveAll(ctx, dir)
	if err != nil {
		return learner.Saved{}, err
	}
	return all[0], nil
}

// saveAll is Save with every rank's answer, by rank: a rank that does
// not see dir's folder says where it staged its part (Saved.Staged).
func (g *Group) saveAll(ctx context.Context, dir string) ([]learner.Saved, error) {
	if g.failed != nil {
		return nil, fmt.Errorf("learner shards: save: %w: %v", ErrGroupFailed, g.failed)
	}
	replies, err := g.fanOut(ctx, g.ranks, "save", func(int) any { return learner.SaveRequest{Dir: dir} }, nil)
	if err != nil {
		return nil, err
	}
	out := make([]learner.Saved, len(replies))
	for i, r := range replies {
		out[i], _ = r.(learner.Saved)
	}
	return out, nil
}

// SetAlgorithm switches every rank's algorithm (and peak rate when lr > 0).
func (g *Group) SetAlgorithm(ctx context.Context, name string, lr float64) error {
	_, err := g.fanOut(ctx, g.ranks, "set algorithm", func(int) any { return learner.SetAlgorithmRequest{Algorithm: name, LR: lr} }, nil)
	return err
}

// Weights offers the policy's weights from rank 0 (every rank holds them
// whole under ZeRO stages 0 and 1).
func (g *Group) Weights(ctx context.Context, req learner.WeightsRequest) (learner.WeightsOffer, error) {
	if g.failed != nil {
		return learner.WeightsOffer{}, fmt.Errorf("learner shards: weights: %w: %v", ErrGroupFailed, g.failed)
	}
	off, err := actor.CallAs[learner.WeightsOffer](ctx, g.sys, g.ranks[0], req)
	g.answered = nil
	if err != nil && ownAnswer(err) {
		g.answered = err
	}
	return off, err
}

var errNoReply = errors.New("no reply")

// lost says whether err means the rank's actor or node is gone, or the
// connection to its node broke (the call's answer is lost either way).
func lost(err error) bool {
	return errors.Is(err, actor.ErrNodeLost) || errors.Is(err, actor.ErrConnLost) ||
		errors.Is(err, actor.ErrActorDied) || errors.Is(err, actor.ErrActorNotFound)
}

// ownAnswer says whether err is a rank's own answer to a call: the rank
// was reached and replied with an error of its own, not that it or its
// node is gone, not an echo of another rank's failure (an abort, a group
// already failed), not that it is stopping (its context ended: the actor
// or its node is going away), not that the call's body could not be
// fetched from the caller (the way between them). A call refused for its
// size (actor.ErrTooLarge, by the caller or the rank) counts as the rank's
// answer: the same call would be refused again.
func ownAnswer(err error) bool {
	if errors.Is(err, actor.ErrTooLarge) {
		return true
	}
	var ae *actor.ActorError
	if !errors.As(err, &ae) || lost(err) {
		return false
	}
	for _, not := range notOwn {
		if strings.Contains(ae.Message, not) {
			return false
		}
	}
	return true
}

// notOwn are the texts of a rank's answer that say the failure is not
// the rank's own (ownAnswer). An ActorError from another process carries
// its cause as text only.
var notOwn = []string{
	ErrGroupFailed.Error(), ErrAborted.Error(),
	context.Canceled.Error(), context.DeadlineExceeded.Error(),
	"fetch message body", "fetch the train batch",
}

// echo says whether err is a rank's answer that only echoes another
// rank's failure: its collective was aborted (RingAbort).
func echo(err error) bool {
	var ae *actor.ActorError
	return errors.As(err, &ae) && !lost(err) && strings.Contains(ae.Message, ErrAborted.Error())
}

// abortFor tells every other rank of the joined group that rank i is
// lost, so their collectives fail now instead of after the timeout.
func (g *Group) abortFor(i int, err error) {
	if g.failed != nil || len(g.mailboxes) != len(g.ranks) {
		return // joining: no epoch to abort yet
	}
	for k, mb := range g.mailboxes {
		if k != i {
			_ = g.sys.Tell(mb, RingAbort{Epoch: g.epoch, From: i, Reason: fmt.Sprintf("rank %d (%s) is lost: %v", i, g.ranks[i].Address, err)})
		}
	}
}

// grace is how long fanOut waits for the other ranks after one failed:
// each of them fails within a collective timeout of its last progress.
func (g *Group) grace() time.Duration { return g.opt.Timeout + g.opt.Timeout/2 }

// fanOut calls every rank at once. A rank found lost (its actor or node
// gone) aborts the others' collectives at once (abortFor). Once one fails
// it waits at most the collective timeout (plus a little) for the rest,
// since they will fail too, then reports every failure by rank, likeliest cause first: lost
// ranks, then timeouts, then aborts that echo another rank's failure.
func (g *Group) fanOut(ctx context.Context, ranks []actor.Ref, what string, msg func(i int) any, check func(i int, reply any) error) ([]any, error) {
	type result struct {
		i     int
		reply any
		err   error
	}
	ch := make(chan result, len(ranks))
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for i, r := range ranks {
		go func() {
			reply, err := g.sys.Call(cctx, r, msg(i))
			if err == nil && check != nil {
				err = check(i, reply)
			}
			ch <- result{i, reply, err}
		}()
	}
	replies := make([]any, len(ranks))
	errs := map[int]error{}
	var grace <-chan time.Time
	for pending := len(ranks); pending > 0; {
		select {
		case r := <-ch:
			pending--
			replies[r.i] = r.reply
			if r.err != nil {
				errs[r.i] = r.err
				if lost(r.err) {
					g.abortFor(r.i, r.err)
				}
				if grace == nil {
					grace = time.After(g.grace())
				}
			}
		case <-grace:
			for i, rp := range replies {
				if rp == nil && errs[i] == nil {
					errs[i] = fmt.Errorf("%w within %s of the first failure (stuck?)", errNoReply, g.grace())
				}
			}
			pending = 0
		}
	}
	if len(errs) == 0 {
		return replies, nil
	}
	g.lost = g.lost[:0]
	for i := range ranks {
		if err := errs[i]; err != nil && (lost(err) || errors.Is(err, errNoReply)) {
			g.lost = append(g.lost, i)
		}
	}
	idx := make([]int, 0, len(errs))
	for i := range errs {
		idx = append(idx, i)
	}
	// A lost or silent rank is the likeliest cause; a rank that timed out waiting
	// names the neighbour it waited for; an abort only echoes another's.
	order := func(i int) int {
		switch err := errs[i]; {
		case lost(err), errors.Is(err, errNoReply):
			return 0
		case strings.Contains(err.Error(), ErrAborted.Error()):
			return 2
		}
		return 1
	}
	sort.Slice(idx, func(a, b int) bool {
		if oa, ob := order(idx[a]), order(idx[b]); oa != ob {
			return oa < ob
		}
		return idx[a] < idx[b]
	})
	parts := make([]string, len(idx))
	for k, i := range idx {
		parts[k] = fmt.Sprintf("rank %d (%s): %v", i, ranks[i].Address, errs[i])
	}
	if err := ctx.Err(); err != nil {
		// The caller gave up (a run stopped at once): say so in a way
		// errors.Is sees, whatever the ranks answered.
		g.answered = nil
		return replies, fmt.Errorf("learner shards: %s (epoch %d): %w: %s", what, g.epoch, err, strings.Join(parts, "; "))
	}
	err := fmt.Errorf("learner shards: %s (epoch %d): %s", what, g.epoch, strings.Join(parts, "; "))
	g.answered = nil
	if answeredAll(errs) {
		g.answered = err
	}
	return replies, err
}

// answeredAll says whether the failures errs (by rank) are the group's
// own answer: at least one rank failed on its own (ownAnswer) and every
// other failure is such an answer too or an abort that echoes one (a rank
// whose step failed alone tells the others: Rank.abort).
func answeredAll(errs map[int]error) bool {
	own := false
	for _, err := range errs {
		switch {
		case ownAnswer(err):
			own = true
		case !echo(err):
			return false
		}
	}
	return own
}
