package actor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	mrand "math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	pa "github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"
	"github.com/rlnode/rlnode/internal/bytesize"
	"github.com/rlnode/rlnode/internal/connlimit"
	"github.com/rlnode/rlnode/internal/ratelog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
)

// Defaults for Config's limits.
const (
	DefaultMaxMessageSize = 64 << 20  // largest message body Call/Tell accept
	DefaultInlineLimit    = 256 << 10 // bodies above this go over the bulk path
	DefaultBatchSize      = 128       // protoactor endpoint-writer batch (messages)

	DefaultMaxUnprovenPerAddr = 64
	DefaultMaxConnsPerAddr    = 256

	// MaxMessageSizeEnv names the environment variable that sets
	// Config.MaxMessageSize where the Config leaves it 0 (an amount such
	// as "512KiB": internal/bytesize).
	MaxMessageSizeEnv = "RLNODE_MAX_MESSAGE_SIZE"
	// BulkStallEnv names the environment variable that sets
	// Config.BulkStall where the Config leaves it 0 (a duration such as
	// "2m"; negative: no bound but the caller's context).
	BulkStallEnv = "RLNODE_BULK_STALL"
)

// Config configures one node's actor system.
type Config struct {
	// Host and Port to listen on for the actor transport; Port 0 picks a free
	// port. Host defaults to 127.0.0.1.
	Host string
	Port int
	// AdvertiseHost is the host other nodes dial, when Host is 0.0.0.0.
	AdvertiseHost string
	// Secret is the cluster key. When set, every connection to the actor
	// transport and the bulk path must prove that it holds the same secret
	// before anything on it is read (auth.go), so a process without it gets
	// nothing done whatever sender it names. Nil leaves both open to anyone
	// who can reach them: only for a node no other process should talk to.
	Secret []byte
	// TLS, when set, secures the actor transport and the bulk path with
	// mutual TLS (under the member handshake when Secret is set too).
	TLS *TLSFiles
	// MaxUnprovenPerAddr caps the connections one remote address (an IPv6
	// one with its /64: internal/addrgroup) may hold on the actor port and
	// on the bulk port before they prove membership
	// (default DefaultMaxUnprovenPerAddr); MaxConnsPerAddr caps all of its
	// connections to each (default DefaultMaxConnsPerAddr). Connections
	// beyond either are closed at once.
	MaxUnprovenPerAddr int
	MaxConnsPerAddr    int
	// MaxMessageSize caps one message body (default 64 MiB, or the
	// environment variable RLNODE_MAX_MESSAGE_SIZE, e.g. "512KiB"); larger
	// bodies are refused at the sender, and a receiver refuses to fetch a
	// larger body it is offered. Use the Bulk API for larger payloads.
	MaxMessageSize int
	// InlineLimit is the body size above which a message travels over the
	// bulk path instead of inside the gRPC batch (default 256 KiB).
	InlineLimit int
	// BatchSize bounds protoactor's endpoint-writer batch (default 128).
	BatchSize int
	// Logger receives the system's logs (default slog.Default()).
	Logger *slog.Logger
	// BulkTCPOnly keeps every bulk transfer on TCP, also between nodes on
	// one host (which otherwise use shared memory: local_linux.go); the
	// environment variable RLNODE_BULK_TCP=1 does the same.
	BulkTCPOnly bool
	// PeerGrace is how long a message from a node the peer filter does not
	// admit yet is held before it is dropped (default DefaultPeerGrace; a
	// negative value drops at once). See held.go.
	PeerGrace time.Duration
	// BulkStall is how long a bulk fetch may receive no byte from its
	// peer, or a push's receiver take no byte and give no answer, before
	// it fails with ErrBulkStalled (default DefaultBulkStall,
	// or the environment variable RLNODE_BULK_STALL, e.g. "2m").
	// It bounds silence, not the transfer: a slow link that keeps
	// delivering bytes is never cut, however large the payload. A
	// negative value waits for the caller's context alone.
	BulkStall time.Duration
}

// DefaultBulkStall is Config.BulkStall's default: as long as a bulk
// server waits for a reader that stops reading.
const DefaultBulkStall = 30 * time.Second

func (c *Config) withDefaults() Config {
	out := *c
	if out.Host == "" {
		out.Host = "127.0.0.1"
	}
	if out.MaxMessageSize <= 0 {
		out.MaxMessageSize = DefaultMaxMessageSize
	}
	if out.InlineLimit <= 0 {
		out.InlineLimit = DefaultInlineLimit
	}
	if out.BatchSize <= 0 {
		out.BatchSize = DefaultBatchSize
	}
	if out.Logger == nil {
		out.Logger = slog.Default()
	}
	if out.PeerGrace == 0 {
		out.PeerGrace = DefaultPeerGrace
	}
	if out.BulkStall == 0 {
		out.BulkStall = DefaultBulkStall
	}
	if out.MaxUnprovenPerAddr <= 0 {
		out.MaxUnprovenPerAddr = DefaultMaxUnprovenPerAddr
	}
	if out.MaxConnsPerAddr <= 0 {
		out.MaxConnsPerAddr = DefaultMaxConnsPerAddr
	}
	return out
}

// Sentinel errors callers branch on.
var (
	ErrTooLarge      = errors.New("message too large")
	ErrActorNotFound = errors.New("actor not found")
	ErrUnknownKind   = errors.New("unknown actor kind")
	ErrNameTaken     = errors.New("actor name already in use")
	ErrNodeLost      = errors.New("node lost")
	// ErrConnLost: the transport's connection to a node broke (protoactor
	// gave up on its endpoint: the peer closed it, was killed, or cannot
	// be dialled). The node may still be up and a member; membership (the
	// cluster layer) decides whether it is lost, with ErrNodeLost.
	ErrConnLost      = errors.New("connection lost (the node may still be up)")
	ErrActorDied     = errors.New("actor died")
	ErrSystemStopped = errors.New("actor system stopped")
	// ErrBulkStalled: a bulk fetch received no byte, or a push's receiver
	// took none and gave no answer, for Config.BulkStall
	// (its peer's process is stuck, or the path to it drops packets while
	// the connection stays open).
	ErrBulkStalled = errors.New("bulk transfer stalled")
)

// ActorError is the error a callee returned (or the panic it raised), as
// the caller sees it. Across nodes only the text survives; in-process the
// original error is kept for errors.Is/As.
type ActorError struct {
	Actor   string
	Message string
	err     error
}

func (e *ActorError) Error() string { return "actor " + e.Actor + ": " + e.Message }
func (e *ActorError) Unwrap() error { return e.err }

// EventType says what happened to a hosted actor.
type EventType int

const (
	EventStarted EventType = iota + 1
	EventRestarted
	EventDied
)

// Event reports a change in a hosted actor's life to the System's observer.
type Event struct {
	Type     EventType
	Ref      Ref
	Cause    string // why it restarted or died: "stopped", "panic: ...", ...
	Restarts int
}

// System is one node's actor system: protoactor's actor system plus its
// remote transport, the message codec, the call machinery and the bulk path.
type System struct {
	cfg      Config
	log      *slog.Logger
	as       *pa.ActorSystem
	rem      *remote.Remote
	addr     string
	replyPID *pa.PID
	bulk     *Bulk

	nextCall atomic.Uint64
	pmu      sync.Mutex
	pending  map[uint64]*pendingCall
	inbound  inboundCalls // calls from other nodes being handled here (cancel.go)

	amu    sync.Mutex
	actors map[string]*hosted // by name

	stats stats

	observer   atomic.Pointer[func(Event)]
	peerFilter atomic.Pointer[func(addr string) bool]
	// peerLeaving says whether the node at an actor address is leaving in
	// order (SetPeerLeaving): the log filter's, read from protoactor's
	// goroutines.
	peerLeaving atomic.Pointer[func(addr string) bool]
	held        heldQueue // messages from senders not (yet) admitted
	proof       *memberProof
	warn        ratelog.Limiter // warnings about what the network sent

	closeOnce sync.Once
	closed    chan struct{}
	// life ends when Stop begins (Context.Context), before the actors are
	// stopped, so a factory still building gives up instead of holding
	// the stop up.
	life    context.Context
	endLife context.CancelFunc
}

type pendingCall struct {
	target string // Address + "/" + ID
	addr   string
	ch     chan callResult
	since  time.Time // when it was sent
	// fail, for a stream (stream.go), takes its failure: ch may be full
	// of items its caller has not read.
	fail chan error
	// id, the context's Done channel it was made with and, in-process,
	// the call itself: what abandonGroup needs.
	id   uint64
	done <-chan struct{}
	lc   *localCall
}

type callResult struct {
	value any           // local reply
	err   error         // local error or failure (node lost, ...)
	wire  *wireEnvelope // remote reply, decoded by the caller
}

// Start starts a node's actor system listening on cfg.Host:cfg.Port.
func Start(cfg Config) (*System, error) {
	if cfg.MaxMessageSize <= 0 {
		if v := os.Getenv(MaxMessageSizeEnv); v != "" {
			n, err := bytesize.Parse(v)
			if err == nil && n <= 0 {
				err = fmt.Errorf("want a positive size")
			}
			if err != nil {
				return nil, fmt.Errorf("actor system: %s=%q: %w", MaxMessageSizeEnv, v, err)
			}
			cfg.MaxMessageSize = int(n)
		}
	}
	if cfg.BulkStall == 0 {
		d, err := BoundFromEnv(BulkStallEnv)
		if err != nil {
			return nil, fmt.Errorf("actor system: %w", err)
		}
		cfg.BulkStall = d
	}
	c := cfg.withDefaults()
	s := &System{
		cfg:     c,
		log:     c.Logger,
		pending: map[uint64]*pendingCall{},
		actors:  map[string]*hosted{},
		closed:  make(chan struct{}),
	}
	s.life, s.endLife = context.WithCancel(context.Background())
	// Call ids start at random (48 bits, so they stay short on the wire):
	// a process restarted at the address of one that died does not meet
	// the cancels other nodes kept for its predecessor's calls.
	s.nextCall.Store(mrand.Uint64() >> 16)
	// Bind first so a busy port is an error, not protoactor's panic.
	lis, err := net.Listen("tcp", net.JoinHostPort(c.Host, strconv.Itoa(c.Port)))
	if err != nil {
		return nil, fmt.Errorf("actor transport: %w", err) // net.Listen's error names the address
	}
	port := lis.Addr().(*net.TCPAddr).Port
	lis.Close()

	quiet := c.Logger.With("component", "protoactor")
	s.as = pa.NewActorSystem(pa.WithLoggerFactory(func(*pa.ActorSystem) *slog.Logger {
		return slog.New(levelFilter{h: quiet.Handler(), min: slog.LevelWarn, leaving: &s.peerLeaving})
	}))

	// The whole batch must fit in one gRPC message: bodies above InlineLimit
	// go over the bulk path, so a batch is at most BatchSize*InlineLimit plus
	// envelope overhead. gRPC's 4 MiB default would otherwise drop the
	// connection and fake a node death (shared/DESIGN.md).
	grpcMax := c.BatchSize*(c.InlineLimit+4096) + (1 << 20)
	if grpcMax > math.MaxInt32 {
		grpcMax = math.MaxInt32
	}
	// Every connection is admitted under the per-address caps, then
	// proves membership (creds.go); the client side dials with the same.
	if s.proof, err = newMemberProof(c.Secret); err != nil {
		return nil, fmt.Errorf("actor transport: %w", err)
	}
	creds := &memberCreds{proof: s.proof, onErr: func(peer string, err error) {
		s.warn.Warn(s.log, "actor transport: refusing a connection", "peer", peer, "err", err)
	}}
	creds.gate = connlimit.New(connlimit.Limits{Unproven: c.MaxUnprovenPerAddr, Total: c.MaxConnsPerAddr})
	dial := creds.Clone().(*memberCreds)
	if c.TLS != nil {
		st, ct, err := c.TLS.load()
		if err != nil {
			return nil, err
		}
		creds.tls, dial.tls = credentials.NewTLS(st), credentials.NewTLS(ct)
	}
	serverOpts := []grpc.ServerOption{grpc.MaxRecvMsgSize(grpcMax), grpc.MaxSendMsgSize(grpcMax),
		grpc.Creds(creds), grpc.ConnectionTimeout(handshakeTimeout)}
	opts := []remote.ConfigOption{
		remote.WithEndpointWriterBatchSize(c.BatchSize),
		remote.WithServerOptions(serverOpts...),
		remote.WithDialOptions(grpc.WithTransportCredentials(dial),
			grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(grpcMax), grpc.MaxCallSendMsgSize(grpcMax)),
			grpc.WithConnectParams(grpc.ConnectParams{Backoff: backoff.DefaultConfig, MinConnectTimeout: handshakeTimeout})),
		// A peer whose port swallows connections (a firewall that drops,
		// a host gone from the network) fails its calls with ErrConnLost
		// after connectTries attempts of handshakeTimeout each and 2 s
		// between them, not protoactor's 5 of gRPC's 20 s.
		func(c *remote.Config) { c.MaxRetryCount = connectTries },
	}
	if c.AdvertiseHost != "" {
		opts = append(opts, remote.WithAdvertisedHost(net.JoinHostPort(c.AdvertiseHost, strconv.Itoa(port))))
	}
	// protoactor listens on Host + ":" + port: an IPv6 literal needs its
	// brackets there.
	paHost := c.Host
	if strings.Contains(paHost, ":") {
		paHost = "[" + paHost + "]"
	}
	s.rem = remote.NewRemote(s.as, remote.Configure(paHost, port, opts...))
	if err := startRemote(s.rem); err != nil {
		return nil, err
	}
	s.addr = s.as.Address()

	s.replyPID, _ = s.as.ProcessRegistry.Add(&replyProcess{s: s}, "rlnode$replies")
	s.as.ProcessRegistry.Add(&cancelProcess{s: s}, cancelProcessID)
	s.as.EventStream.Subscribe(func(ev any) {
		if t, ok := ev.(*remote.EndpointTerminatedEvent); ok {
			s.FailAddress(t.Address, fmt.Errorf("actor transport to %s: %w", t.Address, ErrConnLost))
		}
	})

	bulkHost := c.Host
	s.bulk, err = startBulk(s, bulkHost, c.AdvertiseHost)
	if err != nil {
		s.rem.Shutdown(false)
		return nil, err
	}
	return s, nil
}

// startRemote turns protoactor's panic on a failed listen into an error.
func startRemote(r *remote.Remote) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("actor transport: %v", p)
		}
	}()
	r.Start()
	return nil
}

// Address is the actor transport address other nodes reach this one at.
func (s *System) Address() string { return s.addr }

// Bulk is the node's bulk path for payloads too large for one message.
func (s *System) Bulk() *Bulk { return s.bulk }

// Logger is the system's logger.
func (s *System) Logger() *slog.Logger { return s.log }

// SetObserver installs the function told about every hosted actor's start,
// restart and death. It is called from actor goroutines and must not block.
func (s *System) SetObserver(f func(Event)) { s.observer.Store(&f) }

// SetPeerLeaving installs the check of whether the node at an actor
// address is leaving the cluster in order. protoactor's "lost connection"
// on a connection to such a node, which its process closes as it exits
// (a run's driver, whose peers may still be sending it their last
// replies), is not logged: it put an ERROR line in the log of every node
// that hosted a failed run's actors. Nil checks nothing.
func (s *System) SetPeerLeaving(f func(addr string) bool) {
	if f == nil {
		s.peerLeaving.Store(nil)
		return
	}
	s.peerLeaving.Store(&f)
}

// SetPeerFilter installs the membership check: messages whose sending node
// address it rejects are held for Config.PeerGrace (the sender may have
// joined a moment ago), then logged and dropped. Nil allows every sender.
func (s *System) SetPeerFilter(f func(addr string) bool) {
	if f == nil {
		s.peerFilter.Store(nil)
		return
	}
	s.peerFilter.Store(&f)
}

func (s *System) allowed(from string) bool {
	if from == s.addr {
		return true
	}
	f := s.peerFilter.Load()
	return f == nil || (*f)(from)
}

func (s *System) emit(ev Event) {
	if f := s.observer.Load(); f != nil {
		(*f)(ev)
	}
}

// Stop stops every hosted actor (running their Stopped hooks), fails all
// pending calls and shuts the transport down.
func (s *System) Stop() {
	s.closeOnce.Do(func() {
		s.endLife()
		s.amu.Lock()
		var pids []*pa.PID
		for _, h := range s.actors {
			if h.pid == nil {
				continue // its factory is still running: no actor to stop yet
			}
			h.setStopCause("node stopped")
			pids = append(pids, h.pid)
		}
		s.amu.Unlock()
		for _, pid := range pids {
			_ = s.as.Root.StopFuture(pid).Wait()
		}
		close(s.closed)
		s.failAll(ErrSystemStopped)
		s.bulk.close()
		s.rem.Shutdown(false)
		s.as.Shutdown()
	})
}

// Done is closed once the system has stopped.
func (s *System) Done() <-chan struct{} { return s.closed }

func (s *System) register(target, addr string, done <-chan struct{}, lc *localCall) (uint64, chan callResult) {
	id := s.nextCall.Add(1)
	ch := make(chan callResult, 1)
	if lc != nil {
		lc.id = id
	}
	s.pmu.Lock()
	s.pending[id] = &pendingCall{target: target, addr: addr, ch: ch, since: time.Now(), id: id, done: done, lc: lc}
	s.pmu.Unlock()
	return id, ch
}

// unregister forgets the pending call id; false when it was answered or
// failed meanwhile.
func (s *System) unregister(id uint64) bool {
	s.pmu.Lock()
	_, ok := s.pending[id]
	delete(s.pending, id)
	s.pmu.Unlock()
	return ok
}

func (s *System) complete(id uint64, r callResult) {
	s.pmu.Lock()
	p := s.pending[id]
	delete(s.pending, id)
	s.pmu.Unlock()
	if p == nil {
		return
	}
	if p.fail == nil {
		p.ch <- r // room for one: a call is completed once
		return
	}
	select {
	case p.ch <- r:
	default:
		// A peer that sent past its stream's window: the end is lost, and
		// the stream fails rather than the reply process blocking.
		s.stats.dropped.Add(1)
		select {
		case p.fail <- fmt.Errorf("stream's producer sent past its window of %d: %w", StreamWindow, ErrConnLost):
		default:
		}
	}
}

// deliverItem hands one item of stream id to its caller.
func (s *System) deliverItem(id uint64, r callResult) {
	s.pmu.Lock()
	p := s.pending[id]
	if p != nil && p.fail == nil {
		p = nil // not a stream: a reply is its only answer
	}
	s.pmu.Unlock()
	if p == nil {
		s.stats.dropped.Add(1)
		return
	}
	select {
	case p.ch <- r:
	default:
		s.stats.dropped.Add(1)
		s.warn.Warn(s.log, "dropping a stream item past the stream's window", "from", r.wire.From)
	}
}

func (s *System) failWhere(match func(*pendingCall) bool, err error) {
	s.pmu.Lock()
	var hit []*pendingCall
	for id, p := range s.pending {
		if match(p) {
			hit = append(hit, p)
			delete(s.pending, id)
		}
	}
	s.pmu.Unlock()
	for _, p := range hit {
		if p.fail != nil {
			select {
			case p.fail <- err:
			default:
			}
			continue
		}
		p.ch <- callResult{err: err}
	}
}

// FailAddress fails every pending call to actors on the node at addr. The
// cluster layer calls it when membership declares that node lost.
func (s *System) FailAddress(addr string, err error) {
	s.failWhere(func(p *pendingCall) bool { return p.addr == addr }, err)
}

// PendingAddresses are the addresses of the other nodes that calls from
// this system have waited on for longer than age, each once: what a
// liveness check should look at (the cluster layer pings their nodes).
func (s *System) PendingAddresses(age time.Duration) []string {
	cut := time.Now().Add(-age)
	seen := map[string]bool{}
	var out []string
	s.pmu.Lock()
	for _, p := range s.pending {
		if p.addr != s.addr && !seen[p.addr] && p.since.Before(cut) {
			seen[p.addr] = true
			out = append(out, p.addr)
		}
	}
	s.pmu.Unlock()
	return out
}

// FailActor fails every pending call to the actor ref (it died).
func (s *System) FailActor(ref Ref, err error) {
	key := ref.Address + "/" + ref.ID
	s.failWhere(func(p *pendingCall) bool { return p.target == key }, err)
}

func (s *System) failAll(err error) {
	s.failWhere(func(*pendingCall) bool { return true }, err)
}

// levelFilter drops records below min: protoactor logs every connection at
// Info, which is noise in a node's log.
type levelFilter struct {
	h   slog.Handler
	min slog.Level
	// leaving, where set, holds System.SetPeerLeaving's check.
	leaving *atomic.Pointer[func(addr string) bool]
}

func (l levelFilter) Enabled(ctx context.Context, lv slog.Level) bool {
	return lv >= l.min && l.h.Enabled(ctx, lv)
}
func (l levelFilter) Handle(ctx context.Context, r slog.Record) error {
	if ownClose(r) || l.peerLeft(r) {
		return nil
	}
	return l.h.Handle(ctx, r)
}

// peerLeft says whether r is protoactor's "lost connection" for a
// connection to a node that is leaving in order (its process closed it).
func (l levelFilter) peerLeft(r slog.Record) bool {
	if r.Message != "EndpointWriter lost connection" || l.leaving == nil {
		return false
	}
	f := l.leaving.Load()
	if f == nil {
		return false
	}
	addr := ""
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "address" {
			addr = a.Value.String()
			return false
		}
		return true
	})
	return addr != "" && (*f)(addr)
}

// ownClose says whether r is protoactor's "lost connection" for a
// connection this node closed itself (gRPC's Canceled, "the client
// connection is closing": its endpoint dropped once the peer left or was
// forgotten). Logged as an error, it put an ERROR line in every node's
// log at the end of every run whose driver left the cluster in order.
func ownClose(r slog.Record) bool {
	if r.Message != "EndpointWriter lost connection" {
		return false
	}
	own := false
	r.Attrs(func(a slog.Attr) bool {
		if err, ok := a.Value.Any().(error); ok && a.Key == "error" {
			own = status.Code(err) == codes.Canceled
			return false
		}
		return true
	})
	return own
}
func (l levelFilter) WithAttrs(a []slog.Attr) slog.Handler {
	return levelFilter{h: l.h.WithAttrs(a), min: l.min, leaving: l.leaving}
}
func (l levelFilter) WithGroup(n string) slog.Handler {
	return levelFilter{h: l.h.WithGroup(n), min: l.min, leaving: l.leaving}
}

// DiscardLogger is a logger that writes nothing, for tests and benchmarks.
func DiscardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// ForgetAddress tells the system that the node at addr is gone: pending
// calls to it fail with ErrNodeLost and protoactor drops its endpoint (and
// fires its remote watches) at once instead of retrying the connection.
func (s *System) ForgetAddress(addr string, cause error) {
	if addr == "" || addr == s.addr {
		return
	}
	s.FailAddress(addr, cause)
	s.as.EventStream.Publish(&remote.EndpointTerminatedEvent{Address: addr})
}

type stats struct {
	callsSent, tellsSent, received, dropped, held, bulkServed, bulkFetched, bulkLocal atomic.Uint64
	cancelsSent, cancelsReceived, callsDropped, callsInterrupted                      atomic.Uint64
}

// Stats are a node's transport counters since it started.
type Stats struct {
	CallsSent        uint64 // Call requests sent
	TellsSent        uint64 // Tell messages sent
	MessagesReceived uint64 // requests and tells delivered to local actors
	MessagesDropped  uint64 // malformed, undecodable or from non-members
	MessagesHeld     uint64 // held until their sender became a member (or the grace ran out)
	BulkBytesServed  uint64 // bytes other nodes pulled from this node's offers
	BulkBytesFetched uint64 // bytes this node pulled
	BulkBytesLocal   uint64 // bytes this node served, pulled or pushed through shared memory (same host)
	// CancelsSent counts calls this node gave up before their reply (the
	// caller's context ended) and told the actor's node so; CancelsReceived
	// the cancels other nodes sent here.
	CancelsSent     uint64
	CancelsReceived uint64
	// CallsDropped counts calls to this node's actors given up by their
	// callers before they began: dropped unrun. CallsInterrupted counts
	// running calls whose Context a remote caller's cancel ended.
	CallsDropped     uint64
	CallsInterrupted uint64
}

// Stats returns the transport counters.
func (s *System) Stats() Stats {
	return Stats{
		CallsSent: s.stats.callsSent.Load(), TellsSent: s.stats.tellsSent.Load(),
		MessagesReceived: s.stats.received.Load(), MessagesDropped: s.stats.dropped.Load(),
		MessagesHeld:    s.stats.held.Load(),
		BulkBytesServed: s.stats.bulkServed.Load(), BulkBytesFetched: s.stats.bulkFetched.Load(),
		BulkBytesLocal: s.stats.bulkLocal.Load(),
		CancelsSent:    s.stats.cancelsSent.Load(), CancelsReceived: s.stats.cancelsReceived.Load(),
		CallsDropped: s.stats.callsDropped.Load(), CallsInterrupted: s.stats.callsInterrupted.Load(),
	}
}

// InlineLimit is the largest message body this node sends inside the
// message itself (Config.InlineLimit, or MaxMessageSize where lower);
// larger ones go over the bulk path, up to MaxMessageSize.
func (s *System) InlineLimit() int { return min(s.cfg.InlineLimit, s.cfg.MaxMessageSize) }

// MaxMessageSize is the largest message body this node sends or accepts
// (Config.MaxMessageSize).
func (s *System) MaxMessageSize() int { return s.cfg.MaxMessageSize }

// BoundFromEnv reads a time bound from environment variable name: 0 when
// it is unset, else its duration (a negative one is no bound); zero or
// no duration is an error naming the variable.
func BoundFromEnv(name string) (time.Duration, error) {
	v := os.Getenv(name)
	if v == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(v)
	if err == nil && d == 0 {
		err = errors.New("want a duration such as 2m, or a negative one for none")
	}
	if err != nil {
		return 0, fmt.Errorf("%s=%q: %w", name, v, err)
	}
	return d, nil
}
