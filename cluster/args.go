package cluster

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sync"
	"time"

	"github.com/rlnode/rlnode/actor"
)

// Spawn arguments up to InlineArgsMax bytes (encoded) travel in the actor's
// directory record, which every node holds and gossips. Larger ones stay
// on the spawning node, offered on its bulk path, and the record carries
// a reference: the node that builds the actor (at spawn, and at each
// restart on another node) fetches them. Without that, a few rollout
// actors started with a real tokenizer (megabytes) would make every
// push/pull carry them, and past memberlist's 20 MB state limit no node
// could join. Such arguments live as long as the spawning node, which is
// the lifetime of an actor it owns; a Detached actor outlives it, so
// Spawn refuses them for one that may restart (its restart after its
// node's loss could not fetch them). Making that work would need a node
// other than the host to keep a copy, handed on whenever its keeper
// leaves: not done.
const (
	InlineArgsMax = 64 << 10
	// MaxArgs bounds a spawn's arguments (encoded), as the actor
	// transport bounds a message.
	MaxArgs = 64 << 20
)

// argsRef is where a spawn's large arguments are: the node that spawned
// the actor, its bulk offer and the SHA-256 of their bytes.
type argsRef struct {
	Node string        `msgpack:"n"`
	Ref  actor.BulkRef `msgpack:"r"`
	Sum  string        `msgpack:"s"`
}

// argBlob is one offer of arguments, shared by every actor spawned from
// this node with the same bytes (a pool's replicas).
type argBlob struct {
	ref      argsRef
	inFlight int // spawns from this node not yet answered
}

type argStore struct {
	mu    sync.Mutex
	blobs map[string]*argBlob // by Sum
}

// offerArgs offers args (over InlineArgsMax) on this node's bulk path, or
// finds the offer of the same bytes, and counts a spawn in flight on it;
// done must be called when the spawn has its answer.
func (n *Node) offerArgs(args []byte) (ref argsRef, done func()) {
	h := sha256.Sum256(args)
	sum := hex.EncodeToString(h[:])
	s := &n.args
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.blobs == nil {
		s.blobs = map[string]*argBlob{}
	}
	b := s.blobs[sum]
	if b == nil {
		// Withdrawn by releaseArgs, not by readers or time.
		r := n.sys.Bulk().Offer(args, 1<<30, 100*365*24*time.Hour)
		b = &argBlob{ref: argsRef{Node: n.id, Ref: r, Sum: sum}}
		s.blobs[sum] = b
	}
	b.inFlight++
	return b.ref, func() {
		s.mu.Lock()
		b.inFlight--
		s.mu.Unlock()
	}
}

// releaseArgs withdraws the offers no spawn in flight and no actor that
// is not DEAD refers to.
func (n *Node) releaseArgs() {
	s := &n.args
	// The directory is read under s.mu: a spawn merges its actor's record
	// before its done() takes s.mu, so an offer whose spawn has finished
	// is seen in use here.
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.blobs) == 0 {
		return
	}
	used := map[string]bool{}
	for _, r := range n.dir.Actors() {
		if r.State != Dead && r.ArgsAt != nil && r.ArgsAt.Node == n.id {
			used[r.ArgsAt.Sum] = true
		}
	}
	for sum, b := range s.blobs {
		if b.inFlight == 0 && !used[sum] {
			n.sys.Bulk().Release(b.ref.Ref)
			delete(s.blobs, sum)
		}
	}
}

// fetchArgs gets arguments left on their spawning node's bulk path and
// checks them against their sum.
func (n *Node) fetchArgs(ctx context.Context, at argsRef) ([]byte, error) {
	owner := at.Node
	if at.Ref.Size < 0 || at.Ref.Size > MaxArgs {
		return nil, fmt.Errorf("%d bytes kept by node %s: over the %d-byte bound", at.Ref.Size, owner, MaxArgs)
	}
	b, err := n.sys.Bulk().Fetch(ctx, at.Ref)
	if err != nil {
		return nil, fmt.Errorf("fetch the %d bytes kept by node %s at %s (they live as long as the node that spawned the actor): %w",
			at.Ref.Size, owner, at.Ref.Addr, err)
	}
	h := sha256.Sum256(b)
	if hex.EncodeToString(h[:]) != at.Sum {
		return nil, fmt.Errorf("the %d bytes fetched from node %s at %s do not match their SHA-256", len(b), owner, at.Ref.Addr)
	}
	return b, nil
}
