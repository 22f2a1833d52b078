package cluster

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/rlnode/rlnode/actor"
)

// A node whose gossip answers while its actors do not (their goroutines
// deadlocked, its node actor stuck behind a lock) stays a member:
// membership cannot tell it from a healthy node, and a call to it, an
// object's Get included, would wait for its caller's context, forever
// under context.Background. So while calls from this node wait on another
// node, this node pings that node's node actor, which answers at once
// whatever the node's other actors are doing; a node that leaves a ping
// unanswered for Detection.Unresponsive fails the calls waiting on it with
// ErrNodeUnresponsive, naming it. Bulk transfers have their own bound on
// silence (Config.BulkStall).

// ErrNodeUnresponsive: a node that is still a member left a liveness ping
// unanswered for Detection.Unresponsive while calls waited on it.
var ErrNodeUnresponsive = errors.New("node unresponsive")

// UnresponsiveEnv names the environment variable that sets
// Detection.Unresponsive where the Config leaves it 0: every node and run
// driver a shell starts (`rlnode start`, `join`, `run`, a job's driver)
// reads it.
const UnresponsiveEnv = "RLNODE_UNRESPONSIVE"

// DefaultUnresponsive is Detection.Unresponsive's default: a node actor
// answers a ping in microseconds, and in well under a second on a loaded
// host; 30 s of silence is no slowness.
const DefaultUnresponsive = 30 * time.Second

// livenessLoop pings the nodes that calls have waited on for a while,
// one ping per node at a time, until the node stops.
func (n *Node) livenessLoop() {
	window := n.cfg.Detection.Unresponsive
	if window <= 0 {
		return
	}
	every := max(min(window/4, 5*time.Second), time.Millisecond) // a ticker of 0 panics
	t := time.NewTicker(every)
	defer t.Stop()
	var mu sync.Mutex
	pinging := map[string]bool{} // by actor address
	for {
		select {
		case <-n.stopped:
			return
		case <-t.C:
		}
		for _, addr := range n.sys.PendingAddresses(every) {
			id := n.memberAt(addr)
			mu.Lock()
			busy := pinging[addr]
			if id != "" && !busy {
				pinging[addr] = true
			}
			mu.Unlock()
			if id == "" || busy {
				continue // not a member: membership fails its calls
			}
			go func() {
				n.ping(id, addr, window)
				mu.Lock()
				delete(pinging, addr)
				mu.Unlock()
			}()
		}
	}
}

// memberAt is the id of the live member whose actor address is addr, or
// "".
func (n *Node) memberAt(addr string) string {
	n.mmu.RLock()
	defer n.mmu.RUnlock()
	for id, m := range n.members {
		if m.actor == addr {
			return id
		}
	}
	return ""
}

// ping asks node id's node actor (at addr) for a lookup, which it answers
// at once, and fails every call waiting on that node with
// ErrNodeUnresponsive when no answer comes within window while the node
// is still a member at addr. A ping that fails otherwise (the connection
// broke, the node left) says nothing: the transport and membership fail
// those calls themselves.
func (n *Node) ping(id, addr string, window time.Duration) {
	ref := actor.Ref{Name: nodeActorName, Kind: nodeActorKind, Address: addr, ID: "a/" + nodeActorName}
	ctx, cancel := context.WithTimeout(context.Background(), window)
	// An empty name: every build answers it, and it finds nothing.
	_, err := n.sys.Call(ctx, ref, lookupRequest{})
	cancel()
	if err == nil || !errors.Is(err, context.DeadlineExceeded) || n.stopping() || n.memberAt(addr) != id {
		return
	}
	n.log.Warn("node answers gossip but not its actors: failing the calls waiting on it", "member", id, "actor", addr, "silent", window)
	n.sys.FailAddress(addr, fmt.Errorf("node %s (%s) is a member (its gossip answers) but left a liveness ping to its actors unanswered for %s: %w",
		id, addr, window, ErrNodeUnresponsive))
}
