package cluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/rlnode/rlnode/actor"
)

// Objects, as Ray's object store: Put keeps a value on this node and
// returns an ObjectRef that any node's Get reads, so a large input (a
// dataset shard, a tokenizer, weights) crosses the network once per
// reader rather than inside every task's or actor's arguments. An
// ObjectRef is a plain message: pass it in task arguments, actor
// messages and spawn arguments. An object lives on the node that put it
// until Free or until that node stops (Ray's owner rule): a Get after
// that fails with ErrObjectLost.

// ObjectRef names an object that a node put.
type ObjectRef struct {
	ID   string
	Node string // the node that holds it
	Type string // its registered message type
	At   actor.BulkRef
}

// Size is the object's size encoded, in bytes.
func (r ObjectRef) Size() int64 { return r.At.Size }

// ErrObjectLost: the object was freed, or its node is gone.
var ErrObjectLost = errors.New("object lost")

// ErrObjectStoreFull: a Put would take a node's objects past its bound
// (Config.ObjectStoreBytes).
var ErrObjectStoreFull = errors.New("object store full")

// Bounds of objects.
const (
	// MaxObjectBytes bounds one object encoded.
	MaxObjectBytes = 1 << 30
	// DefaultObjectStoreBytes bounds a node's objects unless
	// Config.ObjectStoreBytes says otherwise.
	DefaultObjectStoreBytes = 2 << 30
	// objectTTL is an offer's life on the bulk path: as long as the
	// node's, in practice (Free withdraws it).
	objectTTL = 100 * 365 * 24 * time.Hour
)

type objectStore struct {
	mu    sync.Mutex
	objs  map[string]storedObject
	bytes int64
}

type storedObject struct {
	ref  ObjectRef
	body []byte
}

type objectFree struct{ IDs []string }

func init() { actor.RegisterMessage(ObjectRef{}, objectFree{}) }

// Put keeps v (a registered message type) on node n and returns its
// reference.
func Put(ctx context.Context, n *Node, v any) (ObjectRef, error) {
	if err := ctx.Err(); err != nil {
		return ObjectRef{}, err
	}
	typ, body, err := actor.EncodeMessage(v)
	if err != nil {
		return ObjectRef{}, fmt.Errorf("put: %w", err)
	}
	if len(body) > MaxObjectBytes {
		return ObjectRef{}, fmt.Errorf("put: %s of %d bytes encoded, over the %d-byte bound of an object", typ, len(body), MaxObjectBytes)
	}
	bound := n.objectStoreBytes()
	s := &n.objects
	s.mu.Lock()
	if s.bytes+int64(len(body)) > bound {
		defer s.mu.Unlock()
		return ObjectRef{}, fmt.Errorf("put: %s of %d bytes on node %s, which holds %d bytes of objects of its %d: %w (free some, or raise Config.ObjectStoreBytes)",
			typ, len(body), n.id, s.bytes, bound, ErrObjectStoreFull)
	}
	var raw [12]byte
	_, _ = rand.Read(raw[:])
	ref := ObjectRef{ID: hex.EncodeToString(raw[:]), Node: n.id, Type: typ}
	ref.At = n.sys.Bulk().Offer(body, math.MaxInt32, objectTTL)
	if s.objs == nil {
		s.objs = map[string]storedObject{}
	}
	s.objs[ref.ID] = storedObject{ref: ref, body: body}
	s.bytes += int64(len(body))
	s.mu.Unlock()
	n.publishNode() // status counts it
	return ref, nil
}

// Get reads the object ref names, from this node's store when n holds it,
// else from the node that does, within ctx.
func Get[T any](ctx context.Context, n *Node, ref ObjectRef) (T, error) {
	var zero T
	body, err := n.objectBody(ctx, ref)
	if err != nil {
		return zero, err
	}
	v, err := actor.DecodeMessage(ref.Type, body)
	if err != nil {
		return zero, fmt.Errorf("get object %s: %w", ref.ID, err)
	}
	t, ok := v.(T)
	if !ok {
		return zero, fmt.Errorf("get object %s: it holds %T, not %T", ref.ID, v, zero)
	}
	return t, nil
}

// objectBody is the encoded object, fetched from its node unless n holds it.
func (n *Node) objectBody(ctx context.Context, ref ObjectRef) ([]byte, error) {
	if ref.ID == "" || ref.Node == "" {
		// The zero ref: never put, or dropped on its way (an unexported
		// field of a message does not travel).
		return nil, fmt.Errorf("get object: empty ObjectRef (the zero value, not one Put returned; is it an exported field of the message that carried it?)")
	}
	if ref.Node == n.id {
		n.objects.mu.Lock()
		o, ok := n.objects.objs[ref.ID]
		n.objects.mu.Unlock()
		if !ok {
			return nil, fmt.Errorf("get object %s: freed on node %s, which put it: %w", ref.ID, n.id, ErrObjectLost)
		}
		return o.body, nil
	}
	if !n.isAlive(ref.Node) {
		return nil, fmt.Errorf("get object %s: node %s, which put it, is gone: %w", ref.ID, ref.Node, ErrObjectLost)
	}
	if ref.At.Size < 0 || ref.At.Size > MaxObjectBytes {
		return nil, fmt.Errorf("get object %s: %d bytes, over the %d-byte bound of an object", ref.ID, ref.At.Size, MaxObjectBytes)
	}
	body, err := n.sys.Bulk().Fetch(ctx, ref.At)
	if err != nil {
		if ctx.Err() == nil && (errors.Is(err, actor.ErrBulkAbsent) || !n.isAlive(ref.Node)) {
			return nil, fmt.Errorf("get object %s from node %s: %w (%v)", ref.ID, ref.Node, ErrObjectLost, err)
		}
		return nil, fmt.Errorf("get object %s from node %s: %w", ref.ID, ref.Node, err)
	}
	return body, nil
}

// Free drops the objects refs name, wherever they are: this node's at
// once, others' by a call to their node, which Free waits for (up to
// freeWait each, in parallel), so a Get after Free fails with
// ErrObjectLost. A node that cannot be reached keeps them until it stops
// (logged).
func (n *Node) Free(refs ...ObjectRef) {
	remote := map[string][]string{}
	for _, r := range refs {
		if r.Node == n.id {
			n.freeLocal(r.ID)
		} else {
			remote[r.Node] = append(remote[r.Node], r.ID)
		}
	}
	var wg sync.WaitGroup
	for node, ids := range remote {
		if !n.isAlive(node) {
			continue // its objects went with it
		}
		ref, err := n.nodeRef(node)
		if err != nil {
			n.log.Warn("free objects: their node is not known here", "node", node, "objects", len(ids), "err", err)
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), freeWait)
			defer cancel()
			if _, err := n.sys.Call(ctx, ref, objectFree{IDs: ids}); err != nil {
				n.log.Warn("free objects: their node did not confirm", "node", node, "objects", len(ids), "err", err)
			}
		}()
	}
	wg.Wait()
}

// freeWait bounds how long Free waits for another node to drop objects.
const freeWait = 10 * time.Second

func (n *Node) freeLocal(ids ...string) {
	s := &n.objects
	s.mu.Lock()
	var gone []storedObject
	for _, id := range ids {
		if o, ok := s.objs[id]; ok {
			delete(s.objs, id)
			s.bytes -= int64(len(o.body))
			gone = append(gone, o)
		}
	}
	s.mu.Unlock()
	for _, o := range gone {
		n.sys.Bulk().Release(o.ref.At)
	}
	if len(gone) > 0 {
		n.publishNode()
	}
}

// Objects is how many objects this node holds and their bytes.
func (n *Node) Objects() (count int, bytes int64) {
	n.objects.mu.Lock()
	defer n.objects.mu.Unlock()
	return len(n.objects.objs), n.objects.bytes
}

func (n *Node) objectStoreBytes() int64 {
	if n.cfg.ObjectStoreBytes > 0 {
		return n.cfg.ObjectStoreBytes
	}
	return DefaultObjectStoreBytes
}

type nodeKey struct{}

// TaskNode is the node a task runs on, from the context its function is
// given (nil elsewhere): what it reads objects with (Get).
func TaskNode(ctx context.Context) *Node {
	n, _ := ctx.Value(nodeKey{}).(*Node)
	return n
}
