package cluster

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"
	"weak"

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
//
// A Get on another node asks the holder's node actor for the object by
// id: the holder answers from what it holds now, so a ref is only a name
// (a ref whose fields were changed, or one from the holder's earlier
// life, reads as lost, never as other bytes), and it offers the bytes on
// the bulk path to that one reader, for the read's length only.
//
// When a Put would take the node's objects in memory past
// Config.ObjectStoreBytes, the least recently used ones are written to
// the node's spill folder (up to Config.ObjectSpillBytes) and read back
// from there by each Get; each file carries its length and a CRC-32C, so
// a damaged one reads as lost, naming the file, never as other bytes.

// ObjectRef names an object that a node put.
type ObjectRef struct {
	ID    string
	Node  string // the node that holds it
	Type  string // its registered message type
	Bytes int64  // its size encoded
}

// Size is the object's size encoded, in bytes.
func (r ObjectRef) Size() int64 { return r.Bytes }

// ErrObjectLost: the object was freed, or its node is gone.
var ErrObjectLost = errors.New("object lost")

// ErrObjectStoreFull: a Put would take a node's objects past its bounds
// (Config.ObjectStoreBytes in memory, Config.ObjectSpillBytes on disk).
var ErrObjectStoreFull = errors.New("object store full")

// Bounds of objects.
const (
	// MaxObjectBytes bounds one object encoded.
	MaxObjectBytes = 1 << 30
	// DefaultObjectStoreBytes bounds a node's objects in memory unless
	// Config.ObjectStoreBytes says otherwise.
	DefaultObjectStoreBytes = 2 << 30
	// NoObjectSpill as Config.ObjectSpillBytes spills nothing: a Put past
	// the memory bound fails.
	NoObjectSpill = -1
	// objectInline bounds an object sent in the holder's answer itself;
	// a larger one goes on the bulk path.
	objectInline = 64 << 10
	// objectOfferTTL bounds how long an object offered to one reader
	// waits for it.
	objectOfferTTL = 2 * time.Minute
	// maxRefField bounds a ref's node and type names: a ref is read
	// from the wire.
	maxRefField = 1024
)

type objectStore struct {
	mu   sync.Mutex
	objs map[string]*storedObject
	// bytes is what the objects hold in memory, with Puts' reservations
	// and the objects being written out (leaving of it).
	bytes, leaving int64
	spilled        int64  // on disk, with files being written
	tick           uint64 // the LRU clock
	dir            string // the spill folder, made at the first spill
	closed         bool
}

type storedObject struct {
	ref      ObjectRef
	body     []byte // nil once spilled
	file     string // its spill file, once written
	used     uint64 // the store's tick at its last Put or Get
	spilling bool   // being written out
	freed    bool   // freed while being written out
	// readBack is the body last read back from file while a reader
	// still holds it (a reader's offer keeps it up to objectOfferTTL):
	// readers at once share one copy, not one each.
	readBack weak.Pointer[byte]
}

type objectFree struct{ IDs []string }

// objectGet asks an object's node for it; objectGot is the answer.
type objectGet struct{ ID string }

type objectGot struct {
	Lost string // why the node does not hold it; empty when it does
	Type string
	Size int64
	Body []byte        // the object, when it is small
	At   actor.BulkRef // else where to fetch it, once
}

func init() { actor.RegisterMessage(ObjectRef{}, objectFree{}, objectGet{}, objectGot{}) }

// errNoNode: Put or Get was given a nil node.
var errNoNode = errors.New("no node (TaskNode(ctx) is nil outside a task's function, ActorNode in an actor system no node started)")

// Put keeps v (a registered message type) on node n and returns its
// reference.
func Put(ctx context.Context, n *Node, v any) (ObjectRef, error) {
	if err := ctx.Err(); err != nil {
		return ObjectRef{}, err
	}
	if n == nil {
		return ObjectRef{}, fmt.Errorf("put: %w", errNoNode)
	}
	if v == nil {
		return ObjectRef{}, errors.New("put: a nil value")
	}
	typ, body, err := actor.EncodeMessage(v)
	if err != nil {
		return ObjectRef{}, fmt.Errorf("put: %w", err)
	}
	size := int64(len(body))
	if size > MaxObjectBytes {
		return ObjectRef{}, fmt.Errorf("put: %s of %d bytes encoded, over the %d-byte bound of an object", typ, size, MaxObjectBytes)
	}
	mem, disk := n.objectStoreBytes(), n.objectSpillBytes()
	s := &n.objects
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ObjectRef{}, fmt.Errorf("put: node %s has stopped", n.id)
	}
	if size > mem {
		s.mu.Unlock()
		return ObjectRef{}, fmt.Errorf("put: %s of %d bytes on node %s, over its whole store of %d bytes in memory: %w (raise Config.ObjectStoreBytes)",
			typ, size, n.id, mem, ErrObjectStoreFull)
	}
	var out []*storedObject
	if over := s.bytes - s.leaving + size - mem; over > 0 {
		var ok bool
		if out, ok = s.pickSpill(over, disk-s.spilled); !ok {
			defer s.mu.Unlock()
			return ObjectRef{}, fmt.Errorf("put: %s of %d bytes on node %s, which holds %d bytes of objects in memory of its %d and %d spilled of its %d: %w (free some, or raise Config.ObjectStoreBytes or Config.ObjectSpillBytes)",
				typ, size, n.id, s.bytes, mem, s.spilled, max(disk, 0), ErrObjectStoreFull)
		}
	}
	s.bytes += size // reserved while the objects going out are written
	s.mu.Unlock()
	if err := n.spill(out); err != nil {
		s.mu.Lock()
		s.bytes -= size
		s.mu.Unlock()
		n.publishNode()
		return ObjectRef{}, fmt.Errorf("put: %s of %d bytes on node %s: %w: %v", typ, size, n.id, ErrObjectStoreFull, err)
	}
	var raw [12]byte
	_, _ = rand.Read(raw[:])
	ref := ObjectRef{ID: hex.EncodeToString(raw[:]), Node: n.id, Type: typ, Bytes: size}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ObjectRef{}, fmt.Errorf("put: node %s has stopped", n.id)
	}
	if s.objs == nil {
		s.objs = map[string]*storedObject{}
	}
	s.tick++
	s.objs[ref.ID] = &storedObject{ref: ref, body: body, used: s.tick}
	s.mu.Unlock()
	n.publishNode() // status counts it
	return ref, nil
}

// pickSpill chooses objects in memory, least recently used first, that
// free at least need bytes and fit in room bytes of disk, and marks them
// as being written out. s.mu is held.
func (s *objectStore) pickSpill(need, room int64) ([]*storedObject, bool) {
	var in []*storedObject
	for _, o := range s.objs {
		if o.body != nil && !o.spilling {
			in = append(in, o)
		}
	}
	sort.Slice(in, func(i, j int) bool { return in[i].used < in[j].used })
	var out []*storedObject
	var freed int64
	for _, o := range in {
		if freed >= need {
			break
		}
		out = append(out, o)
		freed += o.ref.Bytes
	}
	if freed < need || freed > room {
		return nil, false
	}
	for _, o := range out {
		o.spilling = true
		s.leaving += o.ref.Bytes
		s.spilled += o.ref.Bytes
	}
	return out, true
}

// spill writes out the objects pickSpill chose; each written one leaves
// memory. An error names the first file that failed (the others were
// written or given back to memory).
func (n *Node) spill(out []*storedObject) error {
	if len(out) == 0 {
		return nil
	}
	dir, err := n.spillDir()
	var first error
	for _, o := range out {
		path := filepath.Join(dir, o.ref.ID)
		werr := err
		if werr == nil {
			werr = writeSpill(path, o.body)
		}
		s := &n.objects
		s.mu.Lock()
		gone := o.freed || s.closed
		switch {
		case o.freed:
			// Free counted it out already.
		case werr != nil:
			o.spilling = false
			s.leaving -= o.ref.Bytes
			s.spilled -= o.ref.Bytes
		default:
			o.spilling = false
			o.body, o.file = nil, path
			s.bytes -= o.ref.Bytes
			s.leaving -= o.ref.Bytes
		}
		s.mu.Unlock()
		if werr == nil && gone {
			_ = os.Remove(path)
		}
		if werr != nil && first == nil {
			first = werr
		}
	}
	n.publishNode()
	return first
}

// Get reads the object ref names, from this node's store when n holds it,
// else from the node that does, within ctx.
func Get[T any](ctx context.Context, n *Node, ref ObjectRef) (T, error) {
	var zero T
	typ, body, err := n.objectBody(ctx, ref)
	if err != nil {
		return zero, err
	}
	v, err := actor.DecodeMessage(typ, body)
	if err != nil {
		return zero, fmt.Errorf("get object %s: %w", ref.ID, err)
	}
	t, ok := v.(T)
	if !ok {
		return zero, fmt.Errorf("get object %s: it holds %T, not %T", ref.ID, v, zero)
	}
	return t, nil
}

// checkRef refuses a ref that Put cannot have made.
func checkRef(ref ObjectRef) error {
	if ref.ID == "" || ref.Node == "" {
		// The zero ref: never put, or dropped on its way (an unexported
		// field of a message does not travel).
		return fmt.Errorf("get object: empty ObjectRef (the zero value, not one Put returned; is it an exported field of the message that carried it?)")
	}
	if _, err := hex.DecodeString(ref.ID); err != nil || len(ref.ID) != 24 {
		return fmt.Errorf("get object: malformed ObjectRef: an id of %d bytes, not 24 hex digits", len(ref.ID))
	}
	if len(ref.Node) > maxRefField || len(ref.Type) > maxRefField {
		return fmt.Errorf("get object %s: malformed ObjectRef: a node name of %d bytes, a type name of %d (at most %d each)", ref.ID, len(ref.Node), len(ref.Type), maxRefField)
	}
	return nil
}

// objectBody is the encoded object and its type, from n's store or
// fetched from the node that holds it. When the holder cannot be reached
// (killed, most likely, and membership has not noticed yet) it asks again
// until membership says the node is gone, and the object is lost with it,
// or until memberLossWithin has passed and the node is still a member. A
// holder whose gossip answers while its actors do not fails the ask with
// ErrNodeUnresponsive (liveness.go), and one whose bulk path goes silent
// mid-fetch fails it with actor.ErrBulkStalled: neither is asked again.
func (n *Node) objectBody(ctx context.Context, ref ObjectRef) (string, []byte, error) {
	if n == nil {
		return "", nil, fmt.Errorf("get object %.64s: %w", ref.ID, errNoNode)
	}
	if err := checkRef(ref); err != nil {
		return "", nil, err
	}
	if ref.Node == n.id {
		return n.readObject(ctx, ref, n.lookupObject(ref.ID, true))
	}
	var first time.Time // when the holder first could not be reached
	pause := objectRetryFirst
	for {
		// A frozen holder (SIGSTOP, a host stalled) fails no dial and no
		// read: its kernel keeps the connections open. Membership tells
		// it from a live one, as it tells a killed one, and ends the ask
		// and the fetch.
		hctx, stop := n.whileMember(ctx, ref.Node)
		got, err := n.askObject(hctx, ref)
		var typ string
		var body []byte
		if err == nil {
			typ, body, err = n.readObject(hctx, ref, got)
		}
		stop()
		if err != nil && ctx.Err() == nil && errors.Is(context.Cause(hctx), errHolderGone) {
			return "", nil, fmt.Errorf("get object %s: node %s, which put it, stopped answering and membership declared it gone (%v): %w", ref.ID, ref.Node, err, ErrObjectLost)
		}
		if err != nil && ctx.Err() == nil && (errors.Is(err, ErrNodeUnresponsive) || errors.Is(err, actor.ErrBulkStalled)) {
			// Stuck, not gone: asking again would wait as long again, and
			// no other node holds the object.
			return "", nil, fmt.Errorf("%w (no other node holds object %s: an object lives on the node that put it)", err, ref.ID)
		}
		if err == nil || ctx.Err() != nil || !unreachable(err) {
			return typ, body, err
		}
		if first.IsZero() {
			first = time.Now()
		}
		deadline := first.Add(n.memberLossWithin())
		if err := n.awaitHolder(ctx, ref, err, min(pause, time.Until(deadline))); err != nil {
			return "", nil, err
		}
		if time.Now().After(deadline) {
			return "", nil, fmt.Errorf("get object %s from node %s: %w (unreachable for %s, yet still a member)",
				ref.ID, ref.Node, err, time.Since(first).Round(time.Millisecond))
		}
		pause = min(2*pause, objectRetryMax)
	}
}

// errHolderGone is the cause whileMember's context ends with.
var errHolderGone = errors.New("the object's node is no member any more")

// whileMember is ctx, ended with the cause errHolderGone once membership
// says node is gone (looked at every 20 ms), and what stops the watch.
func (n *Node) whileMember(ctx context.Context, node string) (context.Context, func()) {
	hctx, cancel := context.WithCancelCause(ctx)
	done := make(chan struct{})
	go func() {
		poll := time.NewTicker(20 * time.Millisecond)
		defer poll.Stop()
		for {
			select {
			case <-done:
				return
			case <-hctx.Done():
				return
			case <-poll.C:
				if !n.isAlive(node) {
					cancel(errHolderGone)
					return
				}
			}
		}
	}()
	return hctx, func() {
		close(done)
		cancel(nil)
	}
}

// The pauses between asks of a holder that cannot be reached.
const (
	objectRetryFirst = 50 * time.Millisecond
	objectRetryMax   = time.Second
)

// awaitHolder waits for wait, after the holder of ref could not be
// reached (err), and fails with ErrObjectLost, naming the node, as soon
// as membership says it is gone; with ctx's error when ctx ends first.
func (n *Node) awaitHolder(ctx context.Context, ref ObjectRef, err error, wait time.Duration) error {
	done := time.NewTimer(max(wait, 0))
	defer done.Stop()
	poll := time.NewTicker(20 * time.Millisecond)
	defer poll.Stop()
	for {
		if !n.isAlive(ref.Node) {
			return fmt.Errorf("get object %s: node %s, which put it, is gone (%v): %w", ref.ID, ref.Node, err, ErrObjectLost)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("get object %s from node %s: %w (while waiting to learn whether the node is gone, after: %v)", ref.ID, ref.Node, ctx.Err(), err)
		case <-done.C:
			return nil
		case <-poll.C:
		}
	}
}

// memberLossWithin bounds how long membership takes to declare a killed
// member dead, as memberlist times it: a failed probe, then its longest
// suspicion (6 times SuspicionMult × log10(members) probe intervals),
// and missingGrace for the verdict's gossip to come here.
func (n *Node) memberLossWithin() time.Duration {
	d := n.cfg.Detection
	scale := max(1, math.Log10(float64(len(n.aliveIDs()))))
	return d.ProbeInterval + d.ProbeTimeout + time.Duration(6*float64(d.SuspicionMult)*scale*float64(d.ProbeInterval)) + missingGrace
}

// unreachable says whether err, from asking an object's holder or
// fetching from it, is the transport failing (a dial refused, a
// connection broken), not an answer.
func unreachable(err error) bool {
	var ne net.Error
	return errors.Is(err, actor.ErrConnLost) || errors.Is(err, actor.ErrNodeLost) || errors.As(err, &ne) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.ECONNREFUSED)
}

// readObject is the object got says, fetched on the bulk path when the
// holder offered it there.
func (n *Node) readObject(ctx context.Context, ref ObjectRef, got objectGot) (string, []byte, error) {
	if got.Lost != "" {
		return "", nil, fmt.Errorf("get object %s: %s: %w", ref.ID, got.Lost, ErrObjectLost)
	}
	if got.Type != ref.Type {
		return "", nil, fmt.Errorf("get object %s: the ref says it is a %s, node %s holds a %s (a ref changed on its way?)", ref.ID, ref.Type, ref.Node, got.Type)
	}
	if got.Body != nil || got.Size == 0 {
		return got.Type, got.Body, nil
	}
	if beforeObjectFetch != nil {
		beforeObjectFetch(ref)
	}
	body, err := n.sys.Bulk().Fetch(ctx, got.At)
	if err != nil {
		if ctx.Err() == nil && (errors.Is(err, actor.ErrBulkAbsent) || !n.isAlive(ref.Node)) {
			return "", nil, fmt.Errorf("get object %s from node %s: %w (%v)", ref.ID, ref.Node, ErrObjectLost, err)
		}
		return "", nil, fmt.Errorf("get object %s from node %s: %w", ref.ID, ref.Node, err)
	}
	return got.Type, body, nil
}

// beforeObjectFetch, when set (tests), runs between the holder's answer
// and the fetch of a large object.
var beforeObjectFetch func(ObjectRef)

// askObject asks the node that holds ref's object for it.
func (n *Node) askObject(ctx context.Context, ref ObjectRef) (objectGot, error) {
	if !n.isAlive(ref.Node) {
		return objectGot{Lost: fmt.Sprintf("node %s, which put it, is gone", ref.Node)}, nil
	}
	nr, err := n.nodeRef(ref.Node)
	if err != nil {
		return objectGot{Lost: fmt.Sprintf("node %s, which put it, is gone", ref.Node)}, nil
	}
	reply, err := n.sys.Call(ctx, nr, objectGet{ID: ref.ID})
	if err != nil {
		if ctx.Err() == nil && !n.isAlive(ref.Node) {
			return objectGot{Lost: fmt.Sprintf("node %s, which put it, is gone (%v)", ref.Node, err)}, nil
		}
		return objectGot{}, fmt.Errorf("get object %s from node %s: %w", ref.ID, ref.Node, err)
	}
	got, ok := reply.(objectGot)
	if !ok {
		return objectGot{}, fmt.Errorf("get object %s from node %s: it answered %T", ref.ID, ref.Node, reply)
	}
	if got.Lost == "" && (got.Size < 0 || got.Size > MaxObjectBytes || (got.Body != nil && int64(len(got.Body)) != got.Size) ||
		(got.Body == nil && got.Size > 0 && got.At.Size != got.Size)) {
		return objectGot{}, fmt.Errorf("get object %s from node %s: a malformed answer (%d bytes, %d inline, %d offered; at most %d)",
			ref.ID, ref.Node, got.Size, len(got.Body), got.At.Size, MaxObjectBytes)
	}
	return got, nil
}

// lookupObject is what this node holds of object id: the bytes
// themselves when local (this node's own Get), else small ones inline
// and larger ones offered on the bulk path to one reader.
func (n *Node) lookupObject(id string, local bool) objectGot {
	s := &n.objects
	s.mu.Lock()
	o, ok := s.objs[id]
	var body []byte
	var file string
	if ok {
		s.tick++
		o.used = s.tick
		body, file = o.body, o.file
		if p := o.readBack.Value(); body == nil && p != nil {
			body = unsafe.Slice(p, o.ref.Bytes)
		}
	}
	s.mu.Unlock()
	if !ok {
		return objectGot{Lost: fmt.Sprintf("freed on node %s (or put by an earlier run of it)", n.id)}
	}
	if body == nil && o.ref.Bytes > 0 {
		var err error
		if body, err = readSpill(file, o.ref.Bytes); err != nil {
			s.mu.Lock()
			_, held := s.objs[id]
			s.mu.Unlock()
			if !held {
				return objectGot{Lost: fmt.Sprintf("freed on node %s, which put it", n.id)}
			}
			return objectGot{Lost: fmt.Sprintf("node %s cannot read it back from its spill file: %v", n.id, err)}
		}
		s.mu.Lock()
		o.readBack = weak.Make(&body[0])
		s.mu.Unlock()
	}
	got := objectGot{Type: o.ref.Type, Size: o.ref.Bytes}
	if local || len(body) <= objectInline {
		got.Body = body
	} else {
		got.At = n.sys.Bulk().Offer(body, 1, objectOfferTTL)
	}
	return got
}

// serveObject answers another node's objectGet: at once for one in
// memory, from a goroutine for one that must be read from disk (the node
// actor's loop does not wait on the disk).
func (n *Node) serveObject(ctx *actor.Context, m objectGet) (any, error) {
	s := &n.objects
	s.mu.Lock()
	o, ok := s.objs[m.ID]
	onDisk := ok && o.body == nil
	s.mu.Unlock()
	if !onDisk {
		return n.lookupObject(m.ID, false), nil
	}
	reply := ctx.ReplyLater()
	go func() { reply.Send(n.lookupObject(m.ID, false), nil) }()
	return nil, nil
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
		} else if r.Node != "" {
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
			// Only the wait is freeWait: a call whose context ends is
			// cancelled at the actor (dropped unrun while still queued), and
			// the objects must go even when their node answers late. The
			// call itself is bounded by freeDeliver.
			done := make(chan error, 1)
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), freeDeliver)
				defer cancel()
				_, err := n.sys.Call(ctx, ref, objectFree{IDs: ids})
				done <- err
			}()
			wait := time.NewTimer(freeWait)
			defer wait.Stop()
			select {
			case err := <-done:
				if err != nil {
					n.log.Warn("free objects: their node did not confirm", "node", node, "objects", len(ids), "err", err)
				}
			case <-wait.C:
				n.log.Warn("free objects: their node did not confirm in time; the request stays queued there", "node", node, "objects", len(ids), "waited", freeWait)
			}
		}()
	}
	wg.Wait()
}

// freeWait bounds how long Free waits for another node to drop objects;
// freeDeliver how long the request may wait in that node's queue.
const (
	freeWait    = 10 * time.Second
	freeDeliver = 10 * time.Minute
)

func (n *Node) freeLocal(ids ...string) {
	s := &n.objects
	s.mu.Lock()
	var files []string
	gone := 0
	for _, id := range ids {
		o, ok := s.objs[id]
		if !ok {
			continue
		}
		delete(s.objs, id)
		gone++
		switch {
		case o.spilling:
			o.freed = true // its writer removes the file
			s.bytes -= o.ref.Bytes
			s.leaving -= o.ref.Bytes
			s.spilled -= o.ref.Bytes
		case o.body == nil && o.file != "":
			s.spilled -= o.ref.Bytes
			files = append(files, o.file)
		default:
			s.bytes -= o.ref.Bytes
		}
	}
	s.mu.Unlock()
	for _, f := range files {
		_ = os.Remove(f)
	}
	if gone > 0 {
		n.publishNode()
	}
}

// closeObjects drops every object and the spill folder, when the node
// stops.
func (n *Node) closeObjects() {
	s := &n.objects
	s.mu.Lock()
	s.closed = true
	s.objs = nil
	s.bytes, s.leaving, s.spilled = 0, 0, 0
	dir := s.dir
	s.mu.Unlock()
	if dir != "" {
		_ = os.RemoveAll(dir)
	}
}

// Objects is how many objects this node holds and their bytes in memory.
func (n *Node) Objects() (count int, bytes int64) {
	n.objects.mu.Lock()
	defer n.objects.mu.Unlock()
	return len(n.objects.objs), n.objects.bytes
}

// SpilledObjectBytes is the bytes of this node's objects written to its
// spill folder.
func (n *Node) SpilledObjectBytes() int64 {
	n.objects.mu.Lock()
	defer n.objects.mu.Unlock()
	return n.objects.spilled
}

func (n *Node) objectStoreBytes() int64 {
	if n.cfg.ObjectStoreBytes > 0 {
		return n.cfg.ObjectStoreBytes
	}
	return DefaultObjectStoreBytes
}

// objectSpillBytes is the node's spill budget: Config.ObjectSpillBytes,
// by default as much as its memory bound, 0 with NoObjectSpill.
func (n *Node) objectSpillBytes() int64 {
	switch b := n.cfg.ObjectSpillBytes; {
	case b > 0:
		return b
	case b == NoObjectSpill:
		return 0
	}
	return n.objectStoreBytes()
}

// spillRoot is the folder that holds every node's spill folder on this
// host: Config.ObjectSpillDir, or Home()/spill.
func (n *Node) spillRoot() string {
	if n.cfg.ObjectSpillDir != "" {
		return n.cfg.ObjectSpillDir
	}
	return filepath.Join(Home(), "spill")
}

// spillHost is this host's name in spill folders' names: one with no
// "_" (the names' separator).
func spillHost() string {
	h, _ := os.Hostname()
	if h = strings.ReplaceAll(h, "_", "-"); h == "" {
		h = "localhost"
	}
	return h
}

// spillDir is this node's spill folder, made (0700) at the first call:
// under the spill root, named by this host and process (pid and start
// time) so that a later node on the host can tell it from a live one's
// (sweepSpill), and leaves those of other hosts on a shared filesystem
// alone.
func (n *Node) spillDir() (string, error) {
	s := &n.objects
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dir != "" {
		return s.dir, nil
	}
	root := n.spillRoot()
	if err := os.MkdirAll(root, 0o700); err != nil {
		return "", fmt.Errorf("spill folder: %w", err)
	}
	var raw [6]byte
	_, _ = rand.Read(raw[:])
	dir := filepath.Join(root, fmt.Sprintf("%s_%d_%s_%s", spillHost(), os.Getpid(), ownProcessStart(), hex.EncodeToString(raw[:])))
	if err := os.Mkdir(dir, 0o700); err != nil {
		return "", fmt.Errorf("spill folder: %w", err)
	}
	s.dir = dir
	return dir, nil
}

// sweepSpill removes the spill folders under root left by this host's
// processes that no longer run (a node killed before it could remove its
// own).
func sweepSpill(root string, log interface{ Warn(string, ...any) }) {
	entries, err := os.ReadDir(root)
	if err != nil {
		return
	}
	host := spillHost()
	for _, e := range entries {
		parts := strings.Split(e.Name(), "_")
		if !e.IsDir() || len(parts) != 4 || parts[0] != host {
			continue // not a spill folder of this host
		}
		pid, err := strconv.Atoi(parts[1])
		if err != nil || pid == os.Getpid() {
			continue
		}
		if why := processGone(pid, parts[2]); why != "" {
			if err := os.RemoveAll(filepath.Join(root, e.Name())); err != nil {
				log.Warn("remove a dead process's spilled objects", "folder", filepath.Join(root, e.Name()), "err", err)
			}
		}
	}
}

// A spill file is a header (spillMagic, the length as a uint64 and the
// body's CRC-32C, big-endian) and the body.
const (
	spillMagic = "RLOBJ1\n\x00"
	spillHdr   = len(spillMagic) + 8 + 4
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// writeSpill writes body to a new file at path (mode 0600). A failed
// write leaves no file.
func writeSpill(path string, body []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	hdr := make([]byte, 0, spillHdr)
	hdr = append(hdr, spillMagic...)
	hdr = binary.BigEndian.AppendUint64(hdr, uint64(len(body)))
	hdr = binary.BigEndian.AppendUint32(hdr, crc32.Checksum(body, castagnoli))
	_, err = f.Write(hdr)
	if err == nil {
		_, err = f.Write(body)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(path)
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// readSpill reads back the size-byte body of spill file path, refusing
// one whose header or checksum does not match: torn, truncated or
// changed.
func readSpill(path string, size int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var hdr [spillHdr]byte
	if _, err := io.ReadFull(f, hdr[:]); err != nil {
		return nil, fmt.Errorf("%s: header: %w", path, err)
	}
	if string(hdr[:len(spillMagic)]) != spillMagic {
		return nil, fmt.Errorf("%s: not a spill file", path)
	}
	if n := binary.BigEndian.Uint64(hdr[len(spillMagic):]); n != uint64(size) {
		return nil, fmt.Errorf("%s: says %d bytes, the object has %d", path, n, size)
	}
	body := make([]byte, size)
	if _, err := io.ReadFull(f, body); err != nil {
		return nil, fmt.Errorf("%s: %w (torn?)", path, err)
	}
	if extra, _ := f.Read(hdr[:1]); extra > 0 {
		return nil, fmt.Errorf("%s: longer than its %d bytes", path, size)
	}
	if sum := binary.BigEndian.Uint32(hdr[len(spillMagic)+8:]); crc32.Checksum(body, castagnoli) != sum {
		return nil, fmt.Errorf("%s: checksum mismatch (damaged)", path)
	}
	return body, nil
}

type nodeKey struct{}

// TaskNode is the node a task runs on, from the context its function is
// given (nil elsewhere): what it reads objects with (Get).
func TaskNode(ctx context.Context) *Node {
	n, _ := ctx.Value(nodeKey{}).(*Node)
	return n
}
