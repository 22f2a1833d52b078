package cluster

import (
	"fmt"

	"github.com/hashicorp/memberlist"
	"github.com/rlnode/rlnode/internal/mpcheck"
	"github.com/vmihailenco/msgpack/v5"
)

// Wire is the cluster's wire protocol: what its gossip records, node
// metadata and actor messages mean. Nodes of different wire protocols
// refuse each other: a join between them fails naming both builds, a
// member that speaks another one is not taken in, and its directory
// updates are dropped. An older node would otherwise misread what it
// does not know, as building an actor whose large arguments stay on
// another node (ActorRecord.ArgsAt) with none at all.
//
// Bump it with any change an older build would misread; builds before
// this check existed count as 0. 3: cancel, stream and credit envelopes,
// and ActorRecord.MaxCallRetries (an older leader restarting an actor
// would drop it).
const Wire = 3

// spoken is the wire protocol this process speaks and checkWires whether
// it refuses others: Wire and true but in tests, whose child nodes play
// older builds.
var (
	spoken     = Wire
	checkWires = true
)

// wireError is a peer that speaks another wire protocol.
type wireError struct {
	node, addr, build string
	wire              int
	ours              string
}

func (e *wireError) Error() string {
	build := "rlnode " + e.build
	if e.build == "" {
		build = "an rlnode build from before wire protocols were checked"
	}
	return fmt.Sprintf("node %s (%s) runs %s, wire protocol %d; this node runs rlnode %s, wire protocol %d: every node of a cluster must run builds of one wire protocol (`rlnode version` prints it); install one rlnode on every host",
		e.node, e.addr, build, e.wire, e.ours, spoken)
}

// checkWire is nil when memberlist node m speaks this node's wire
// protocol, else why not.
func (n *Node) checkWire(m *memberlist.Node) error {
	var meta nodeMeta
	if err := unmarshalChecked(m.Meta, &meta); err != nil {
		return fmt.Errorf("node %s (%s): unreadable metadata: %w", m.Name, m.Address(), err)
	}
	if meta.Wire != spoken {
		return &wireError{node: m.Name, addr: m.Address(), build: meta.Build, wire: meta.Wire, ours: n.build}
	}
	return nil
}

// wireDelegate keeps members of another wire protocol out: NotifyMerge
// refuses a state exchange that brings one (on the joining node its error
// fails the join, on the node joined it drops the joiner's state), and
// NotifyAlive refuses the gossip that announces one.
type wireDelegate struct{ n *Node }

func (d wireDelegate) NotifyMerge(peers []*memberlist.Node) error {
	for _, p := range peers {
		if p.State != memberlist.StateAlive && p.State != memberlist.StateSuspect {
			continue
		}
		if err := d.n.checkWire(p); err != nil {
			d.n.refuseWire(err)
			return err
		}
	}
	return nil
}

func (d wireDelegate) NotifyAlive(peer *memberlist.Node) error {
	if err := d.n.checkWire(peer); err != nil {
		d.n.refuseWire(err)
		return err
	}
	return nil
}

// refuseWire remembers the first refusal for a join under way, which
// reports it instead of memberlist's generic failure; later ones are
// warned about.
func (n *Node) refuseWire(err error) {
	if n.joining.Load() {
		n.wireRefused.CompareAndSwap(nil, &err)
		return
	}
	n.warn.Warn(n.log, "refusing a member of another wire protocol", "err", err)
}

// unmarshalChecked decodes msgpack bytes another node sent into v, once
// mpcheck has found that they declare no more than they hold (msgpack
// makes a slice at its declared length before reading an element).
func unmarshalChecked(b []byte, v any) error {
	if err := mpcheck.Check(b); err != nil {
		return err
	}
	return msgpack.Unmarshal(b, v)
}
