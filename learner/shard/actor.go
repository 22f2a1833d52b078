package shard

import (
	"fmt"
	"time"

	"github.com/rlnode/rlnode/actor"
	"github.com/rlnode/rlnode/cluster"
	"github.com/rlnode/rlnode/learner"
)

// ActorKind is the kind of a learner rank: a learner.Learner plus a
// mailbox, spawned with learner.ActorConfig (the same Config and seed, or
// ResumeDir, on every rank), then joined to its group with JoinRequest. It
// answers the learner actor's TrainRequest, SaveRequest, WeightsRequest and
// SetAlgorithmRequest; a Train or Save must go to every rank of the group at
// once (Group does that).
const ActorKind = "learner-shard"

// MailboxRequest asks a rank actor for its mailbox; the reply is
// MailboxRef.
type MailboxRequest struct{}

// MailboxRef names a rank's mailbox.
type MailboxRef struct {
	Ref actor.Ref
}

// JoinRequest makes the rank actor rank Rank of the group whose mailboxes
// are Peers, for Epoch; with ResumeDir it first loads that checkpoint
// (a restart). The reply is Joined.
type JoinRequest struct {
	Epoch     uint64
	Rank      int
	Peers     []actor.Ref
	Options   Options
	ResumeDir string
}

// Joined acknowledges JoinRequest; Gradients is Rank.Gradients.
type Joined struct {
	Rank, Step, Stage int
	Gradients         string
}

func init() {
	actor.RegisterMessage(MailboxRequest{}, MailboxRef{}, JoinRequest{}, Joined{})
	actor.RegisterKind(ActorKind, func(ctx *actor.Context, args any) (actor.Actor, error) {
		cfg, ok := args.(learner.ActorConfig)
		if !ok {
			return nil, fmt.Errorf("learner-shard actor: spawn args are %T, want learner.ActorConfig", args)
		}
		// A rank that holds GPUs opens the device its node's ledger gave
		// it, not one another holder on the node (a rollout actor, a
		// task) may have.
		cfg.Config.Device = cluster.DeviceFor(cfg.Config.Device, cluster.ActorGPUs(ctx))
		l, st, err := learner.OpenActor(ctx, cfg)
		if err != nil {
			return nil, err
		}
		mb, err := OpenMailbox(ctx.System(), ctx.Self().Name+".mailbox")
		if err != nil {
			l.Close()
			if st != nil {
				st.Close()
			}
			return nil, err
		}
		return &rankActor{l: l, mb: mb, st: st}, nil
	})
}

type rankActor struct {
	l    *learner.Learner
	mb   *Mailbox
	rank *Rank
	st   *learner.Staging // nil when the node sees the run folder
}

// Stopped implements actor.Stopper: the mailbox, the rank's buffers and
// the learner's device are released, and its staging folder removed.
func (a *rankActor) Stopped(*actor.Context) {
	a.mb.Close()
	if a.rank != nil {
		a.rank.Close()
	}
	a.l.Close()
	if a.st != nil {
		a.st.Close()
	}
}

// Receive implements actor.Actor.
func (a *rankActor) Receive(ctx *actor.Context, msg any) (any, error) {
	switch m := msg.(type) {
	case MailboxRequest:
		return MailboxRef{Ref: a.mb.Ref()}, nil
	case JoinRequest:
		t, err := a.mb.Transport(m.Epoch, m.Rank, m.Peers, m.Options)
		if err != nil {
			return nil, err
		}
		if a.rank != nil {
			a.rank.Close()
		}
		a.rank = nil
		var r *Rank
		switch {
		case m.ResumeDir != "" && a.st != nil:
			err = a.st.Load(ctx.Context(), m.ResumeDir, func(dir string) error {
				var lerr error
				r, lerr = RestartContext(ctx.Context(), a.l, t, m.Epoch, m.Options, dir)
				return lerr
			})
		case m.ResumeDir != "":
			r, err = RestartContext(ctx.Context(), a.l, t, m.Epoch, m.Options, m.ResumeDir)
		default:
			r, err = Join(a.l, t, m.Epoch, m.Options)
		}
		if err != nil {
			return nil, err
		}
		a.rank = r
		return Joined{Rank: m.Rank, Step: a.l.Step(), Stage: r.Stage(), Gradients: r.Gradients()}, nil
	case learner.TrainRequest:
		if a.rank == nil {
			return nil, fmt.Errorf("learner-shard %s: train before joining a group", ctx.Self().Name)
		}
		b, err := m.LoadBatch(ctx.Context(), ctx.System())
		if err != nil {
			// The other ranks have their batch and wait in the step's
			// first collective: end it now, not at the timeout.
			err = fmt.Errorf("learner-shard %s: %w", ctx.Self().Name, err)
			a.rank.refuse(err)
			return nil, err
		}
		return a.l.TrainContext(ctx.Context(), b)
	case learner.SaveRequest:
		if a.rank == nil {
			return nil, fmt.Errorf("learner-shard %s: save before joining a group", ctx.Self().Name)
		}
		if m.Dir == "" {
			return nil, fmt.Errorf("learner-shard %s: save: empty directory", ctx.Self().Name)
		}
		if a.st != nil {
			man, err := a.st.Save(ctx.Context(), m.Dir, func(dir string) error { return a.rank.SaveContext(ctx.Context(), dir) })
			if err != nil {
				return nil, err
			}
			return learner.Saved{Dir: m.Dir, Step: a.l.Step(), Staged: man}, nil
		}
		if err := a.rank.SaveContext(ctx.Context(), m.Dir); err != nil {
			return nil, err
		}
		return learner.Saved{Dir: m.Dir, Step: a.l.Step()}, nil
	case learner.ListRequest:
		if a.st != nil {
			l := a.st.Listed()
			l.Device = a.l.Config().Device
			return l, nil
		}
		return learner.ListDir(m.Dir, ctx.System().Address(), a.l.Config().Device)
	case learner.LoadRequest:
		return nil, fmt.Errorf("learner-shard %s: a rank loads a checkpoint only with its whole group (JoinRequest.ResumeDir, Group.Restart)", ctx.Self().Name)
	case learner.SetAlgorithmRequest:
		if err := a.l.SetAlgorithm(m.Algorithm, m.LR); err != nil {
			return nil, err
		}
		return learner.AlgorithmSet{Algorithm: m.Algorithm}, nil
	case learner.WeightsRequest:
		w, ad, err := a.l.PolicyWeightsPart(ctx.Context(), m.Part)
		if err != nil {
			return nil, fmt.Errorf("learner-shard %s: %w", ctx.Self().Name, err)
		}
		data, err := learner.EncodeWeightsContext(ctx.Context(), w)
		if err != nil {
			return nil, fmt.Errorf("learner-shard %s: weights: %w", ctx.Self().Name, err)
		}
		ttl := m.TTL
		if ttl <= 0 {
			ttl = 2 * time.Minute
		}
		return learner.WeightsOffer{Step: a.l.Step(), Ref: ctx.System().Bulk().Offer(data, m.Readers, ttl), Adapter: ad}, nil
	}
	if a.st != nil {
		if reply, ok, err := a.st.Serve(msg); ok {
			return reply, err
		}
	}
	return nil, fmt.Errorf("learner-shard %s: unexpected message %T", ctx.Self().Name, msg)
}
