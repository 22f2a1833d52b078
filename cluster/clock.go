package cluster

import (
	"encoding/binary"
	"time"

	"github.com/hashicorp/memberlist"
)

// ClockSkewWarn is how far another node's wall clock may be from this
// node's before this node warns. Records of dead actors and removed
// placement groups are kept deadRecordTTL by the clock of the node that
// wrote them, so clocks further apart than that let a node that missed a
// removal bring the old record back; uptimes would read wrong too. Hosts
// kept in sync (NTP) are milliseconds apart.
const ClockSkewWarn = 30 * time.Second

// clockEvery is how often the skew of one node is warned about again.
const clockEvery = 10 * time.Minute

// clockTag starts the payload of this build's gossip acks: the acking
// node's wall clock in Unix milliseconds. Payloads without it (another
// build's) are ignored.
const clockTag = 'c'

// clockDelegate carries wall clocks on memberlist's probe acks, which
// every node sends to each other node every few seconds anyway: the
// prober takes the acking node's clock at the middle of the round trip.
type clockDelegate struct{ n *Node }

func (c clockDelegate) AckPayload() []byte {
	b := make([]byte, 9)
	b[0] = clockTag
	binary.BigEndian.PutUint64(b[1:], uint64(c.n.now().UnixMilli()))
	return b
}

func (c clockDelegate) NotifyPingComplete(other *memberlist.Node, rtt time.Duration, payload []byte) {
	if len(payload) != 9 || payload[0] != clockTag || rtt > 2*time.Second {
		return // another build's ack, or a round trip too long to tell
	}
	theirs := time.UnixMilli(int64(binary.BigEndian.Uint64(payload[1:])))
	c.n.noteClock(other.Name, theirs.Sub(c.n.now().Add(-rtt/2)))
}

// now is this node's wall clock (a test may set another).
func (n *Node) now() time.Time {
	if n.cfg.clock != nil {
		return n.cfg.clock()
	}
	return time.Now()
}

type clockNote struct {
	offset time.Duration // their clock minus ours
	warned time.Time
}

// noteClock records how far node id's clock is ahead of this node's
// (negative: behind), and warns, at most every clockEvery for one node,
// when that is more than ClockSkewWarn.
func (n *Node) noteClock(id string, offset time.Duration) {
	n.clockMu.Lock()
	note := n.clocks[id]
	note.offset = offset
	warn := offset.Abs() > ClockSkewWarn && time.Since(note.warned) > clockEvery
	if warn {
		note.warned = time.Now()
	}
	n.clocks[id] = note
	n.clockMu.Unlock()
	if warn {
		n.log.Warn("node clocks apart: keep the hosts' clocks in sync (NTP); records of dead actors and removed placement groups expire by their writer's clock, and uptimes read wrong",
			"node", id, "clock", clockWords(offset))
	}
}

// ClockOffset is how far node id's wall clock was ahead of this node's
// (negative: behind) when last measured; false before any measure.
func (n *Node) ClockOffset(id string) (time.Duration, bool) {
	n.clockMu.Lock()
	defer n.clockMu.Unlock()
	note, ok := n.clocks[id]
	return note.offset, ok
}

// clockWords says an offset as "3m20s ahead" or "1.5s behind".
func clockWords(offset time.Duration) string {
	if offset < 0 {
		return offset.Abs().Round(100*time.Millisecond).String() + " behind"
	}
	return offset.Round(100*time.Millisecond).String() + " ahead"
}
