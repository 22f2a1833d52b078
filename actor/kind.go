package actor

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"sync"
)

// Actor is the behaviour of one actor. Receive is called for one message at
// a time (never concurrently for the same actor), unless the actor was
// spawned with a MaxConcurrency above 1: then up to that many calls run at
// once, in no given order, and Receive must be safe for concurrent use.
// Its result is the reply to a Call (ignored for a Tell) and a non-nil
// error reaches the caller as an *ActorError. A panic inside Receive is
// caught: the actor is restarted while it has restarts left, and dies with
// the panic text as cause after.
type Actor interface {
	Receive(ctx *Context, msg any) (any, error)
}

// Stopper is implemented by actors that release resources when they stop.
type Stopper interface {
	Stopped(ctx *Context)
}

// Factory builds a fresh actor instance of a kind. args is the spawn
// argument (a registered message value, or nil); the same args are passed
// again when the actor is restarted.
type Factory func(ctx *Context, args any) (Actor, error)

var kinds = struct {
	sync.RWMutex
	m map[string]Factory
}{m: map[string]Factory{}}

// RegisterKind makes an actor kind spawnable by name. Every node must
// register the same kinds (typically from init), as with Ray's actor classes.
func RegisterKind(name string, f Factory) {
	if name == "" || f == nil {
		panic("actor.RegisterKind: empty name or nil factory")
	}
	kinds.Lock()
	kinds.m[name] = f
	kinds.Unlock()
}

// Kinds lists the registered kind names, sorted.
func Kinds() []string {
	kinds.RLock()
	defer kinds.RUnlock()
	out := make([]string, 0, len(kinds.m))
	for k := range kinds.m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func lookupKind(name string) (Factory, bool) {
	kinds.RLock()
	f, ok := kinds.m[name]
	kinds.RUnlock()
	return f, ok
}

// Context is what an actor sees of the runtime while it handles a message.
type Context struct {
	sys      *System
	self     Ref
	restarts int
	life     context.Context // ends when this actor is asked to stop, or its node
	// call is the cancellation of the call being handled (nil in a
	// factory, a Stopped hook or a Tell): each call's Receive gets a
	// Context of its own.
	call *callState

	// The message Receive is handling, and its deferred reply once
	// ReplyLater was called: only Receive's goroutine touches them.
	cur   delivery
	later *Reply
}

// Self is this actor's reference.
func (c *Context) Self() Ref { return c.self }

// System is the actor system hosting this actor, for calls to other actors.
func (c *Context) System() *System { return c.sys }

// Restarts is how many times this actor has been restarted so far.
func (c *Context) Restarts() int { return c.restarts }

// Context is the context of what the actor is doing. In Receive handling
// a Call it is the call's, as net/http's Request.Context: it ends when
// the caller gives the call up (its context ends, its Future is
// cancelled: context.Cause is then ErrCallCancelled), when the call is
// answered (Receive returns, or the Reply of ReplyLater is sent) and when
// the actor is asked to stop. In a factory, a Stopped hook or a Tell's
// Receive it is Life. A Receive that works long (a learner's step, a
// generation) passes it down and returns its error, so a call nobody
// waits for any more stops; work that must outlive the call takes Life.
func (c *Context) Context() context.Context {
	if c.call == nil {
		return c.life
	}
	return c.call.context(c.life)
}

// Life is cancelled when the actor is asked to stop (StopLocal, and so
// a cluster's StopActor) or its node begins to stop. A factory that builds
// something large (a learner's model) and work that outlives one call (a
// job the actor runs in the background) check it, so a stop does not wait
// for them: an actor stops only once its Receive returns.
func (c *Context) Life() context.Context { return c.life }

// Logger is the system's logger with the actor's name attached.
func (c *Context) Logger() *slog.Logger { return c.sys.log.With("actor", c.self.Name) }

// Ref names an actor anywhere in the cluster. It is a plain value: refs can
// be sent inside messages.
type Ref struct {
	Name    string `msgpack:"n" json:"name"`
	Kind    string `msgpack:"k" json:"kind"`
	Address string `msgpack:"a" json:"address"` // actor transport address of the hosting node
	ID      string `msgpack:"i" json:"id"`      // protoactor process id on that node
}

func (r Ref) String() string { return fmt.Sprintf("%s@%s", r.Name, r.Address) }

// IsZero reports whether r refers to nothing.
func (r Ref) IsZero() bool { return r.Address == "" && r.ID == "" }
