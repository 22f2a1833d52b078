package cluster

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"os"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/rlnode/rlnode/actor"
	"github.com/rlnode/rlnode/internal/buildinfo"
	"github.com/rlnode/rlnode/internal/ratelog"
	"github.com/vmihailenco/msgpack/v5"
)

// Config configures a node. The zero value (plus nothing else) is the
// embedded default: a single-node cluster on loopback with random ports.
type Config struct {
	// NodeID names the node; default: hostname plus a random suffix.
	NodeID string
	// Bind is the gossip address, HOST:PORT (port 0 picks a free one).
	// Default 127.0.0.1:0.
	Bind string
	// Advertise is the host other nodes reach this one at, when Bind's
	// host is 0.0.0.0.
	Advertise string
	// ActorBind is the actor transport address; default: Bind's host, a
	// free port.
	ActorBind string
	// Join lists gossip addresses of existing members; empty starts a new
	// cluster.
	Join []string
	// Key is the cluster key (16, 24 or 32 bytes): it encrypts gossip, and
	// every connection to the actor transport and the bulk path must prove
	// it holds the key before anything on it is read. Nil starts a new
	// cluster under a fresh random key (Node.Key returns it, for processes
	// that should join); joining needs the cluster's key.
	Key []byte
	// CPUs the node offers (default runtime.NumCPU()), GPUs it offers (-1
	// detects NVIDIA GPUs), Resources any custom ones, Labels its labels.
	CPUs float64
	GPUs int
	// NoResources makes the node offer no CPUs and no memory, whatever
	// CPUs and Memory say: a run's driver that hosts none of its actors
	// (give GPUs 0 and no Resources too).
	NoResources bool
	// Memory is the memory the node offers, in bytes (the Memory
	// resource): 0 detects it (DetectMemory; Start fails where it cannot),
	// NoMemory offers none.
	Memory    int64
	Resources Resources
	Labels    map[string]string
	// ObjectStoreBytes bounds the objects the node holds in memory (Put);
	// 0 means DefaultObjectStoreBytes.
	ObjectStoreBytes int64
	// ObjectSpillBytes bounds the objects the node writes to its spill
	// folder when a Put would pass ObjectStoreBytes (least recently used
	// first); 0 means as much as ObjectStoreBytes, NoObjectSpill none.
	ObjectSpillBytes int64
	// ObjectSpillDir holds the spill folders of the nodes of this host
	// (each node's made 0700 at its first spill, removed when it stops,
	// and a killed node's by the next node to start); default
	// Home()/spill.
	ObjectSpillDir string
	// TLS secures the actor transport and bulk path.
	TLS *actor.TLSFiles
	// BulkStall is how long a bulk transfer (an object's Get, a weight or
	// checkpoint pull) may receive no byte before it fails (default
	// actor.DefaultBulkStall; negative: only the caller's context bounds
	// it). It bounds silence, not length: a slow link is never cut.
	BulkStall time.Duration
	// Detection tunes failure detection; zero means FastDetection.
	Detection Detection
	// JoinTimeout bounds Join (default 10s).
	JoinTimeout time.Duration
	Logger      *slog.Logger
	// ConnsPerAddr caps the connections one remote address may hold open
	// on each of the node's ports; zero takes the default.
	ConnsPerAddr ConnCaps

	// clock, when set, is the node's wall clock (tests of clock skew).
	clock func() time.Time
}

// ConnCaps are a node's caps on the connections one remote address (an
// IPv6 one with its /64, see internal/addrgroup) may hold open on each of
// its ports; zero takes the default. Hosts that share a /64 share each
// cap: members or clients in one cloud /64 may need them raised.
type ConnCaps struct {
	Gossip  int // gossip TCP streams (DefaultGossipConnsPerAddr)
	Actor   int // connections to the actor port, and to the bulk port (actor.DefaultMaxConnsPerAddr)
	Control int // connections to the control endpoint (DefaultControlConnsPerAddr)
}

const (
	DefaultGossipConnsPerAddr  = 64
	DefaultControlConnsPerAddr = 32
	// MaxConnsPerAddr bounds every cap per address a node is given.
	MaxConnsPerAddr = 65536
)

// check refuses a cap below zero or above MaxConnsPerAddr.
func (c ConnCaps) check() error {
	for _, f := range []struct {
		name string
		n    int
	}{{"gossip", c.Gossip}, {"actor", c.Actor}, {"control", c.Control}} {
		if f.n < 0 || f.n > MaxConnsPerAddr {
			return fmt.Errorf("connections per address on the %s port: %d: want 1 to %d (0: the default)", f.name, f.n, MaxConnsPerAddr)
		}
	}
	return nil
}

// orDefault is n, or def when n is zero.
func orDefault(n, def int) int {
	if n == 0 {
		return def
	}
	return n
}

// Detection holds memberlist's failure-detection knobs.
type Detection struct {
	ProbeInterval  time.Duration
	ProbeTimeout   time.Duration
	SuspicionMult  int
	GossipInterval time.Duration
	PushPull       time.Duration
	// OwnerGrace is how long a node that owns actors or placement groups
	// (SpawnOptions.Detached) may be missing, without having been seen to
	// leave, before the leader stops them: longer than a false loss lasts,
	// short enough that a crashed driver's actors do not hold their
	// nodes' resources for long (default 15 s, at most MaxOwnerGrace).
	// It is the owner's to say: a node publishes its value in its record,
	// and the leader applies each owner's own (its own only to an owner
	// whose record has none).
	OwnerGrace time.Duration
	// Unresponsive is how long another node may leave a liveness ping
	// unanswered, while calls from this node wait on it, before those
	// calls fail with ErrNodeUnresponsive (default DefaultUnresponsive, or
	// the environment variable RLNODE_UNRESPONSIVE, e.g. "2m"; a negative
	// value never pings). Membership cannot see such a node: its
	// gossip answers while its actors do not (deadlocked, or stuck behind
	// one that never returns). An actor busy with a long call is not
	// unresponsive: the ping goes to its node's own actor, not to it.
	Unresponsive time.Duration
}

// FastDetection notices a killed node in about a second on a LAN or
// loopback (measured: see docs/benchmarks.md), at the cost of more probe traffic than
// memberlist's DefaultLANConfig (about 5 s).
var FastDetection = Detection{
	ProbeInterval:  300 * time.Millisecond,
	ProbeTimeout:   200 * time.Millisecond,
	SuspicionMult:  2,
	GossipInterval: 100 * time.Millisecond,
	PushPull:       5 * time.Second,
	OwnerGrace:     15 * time.Second,
}

// LANDetection is memberlist's LAN probing (DefaultLANConfig's probe 1 s,
// timeout 500 ms, suspicion multiplier 4, gossip 200 ms) with
// FastDetection's push/pull: a killed node is noticed in about 11 s in a
// three-node cluster (memberlist's suspicion waits longer when few members
// can confirm it), and a node frozen for 3 s is not taken for lost. For
// hosts so loaded that FastDetection reports false losses
// (docs/internals.md has both measured).
var LANDetection = Detection{
	ProbeInterval:  time.Second,
	ProbeTimeout:   500 * time.Millisecond,
	SuspicionMult:  4,
	GossipInterval: 200 * time.Millisecond,
	PushPull:       5 * time.Second,
	OwnerGrace:     30 * time.Second,
}

// MaxOwnerGrace bounds Detection.OwnerGrace.
const MaxOwnerGrace = time.Hour

// DetectionNames are the values ParseDetection takes.
var DetectionNames = []string{"fast", "lan"}

// ParseDetection returns the failure-detection settings named by a
// --detection flag: "fast" (FastDetection) or "lan" (LANDetection).
func ParseDetection(name string) (Detection, error) {
	switch name {
	case "fast":
		return FastDetection, nil
	case "lan":
		return LANDetection, nil
	}
	return Detection{}, fmt.Errorf("failure detection %q: want %s", name, strings.Join(DetectionNames, " or "))
}

// Node is one member of a cluster: its actor system, its memberlist and its
// copy of the directory. Programs use it Ray-style: Spawn, Lookup, Call,
// Watch, placement groups.
type Node struct {
	cfg     Config
	id      string
	log     *slog.Logger
	sys     *actor.System
	ml      *memberlist.Memberlist
	dir     *Directory
	queue   *memberlist.TransmitLimitedQueue
	started time.Time
	// bornMs is when this process started the node, on the clock that
	// stamps the records it writes (ActorRecord.UpdatedMs): what an
	// earlier process under its id wrote is older (forgetPreviousLife).
	bornMs int64

	ledger  ledger
	gpuList []GPUInfo // found or declared at Start

	bmu      sync.Mutex
	building map[string]*nodeBuild // actors whose factories run (nodeactor.go)

	ctlMu     sync.Mutex
	ctlRoutes []controlRoute // HandleControl's

	// hostedMu orders this node's rewrites of the records of actors it
	// hosts (their events, SetNote): two rewrites from one read would
	// write one version twice, and the directory keeps the first.
	hostedMu sync.Mutex

	objects objectStore // Put's (object.go)

	mmu     sync.RWMutex
	members map[string]memberInfo // alive members by node id

	wmu      sync.Mutex
	watchers map[string][]chan ActorRecord
	changed  chan struct{} // closed and replaced on every actor change

	recMu   sync.Mutex           // one reconcile pass at a time
	moveMu  sync.Mutex           // one change of a group record at a time (replaceBundle, RemovePlacementGroup: read, change, write)
	missing map[string]time.Time // node id -> first seen missing (reconcile)
	// ownerMissing: owner node id -> first seen missing (ownerGone, under
	// recMu); reaping: what reapOrphans is stopping now.
	ownerMissing map[string]time.Time
	memoryFrom   string // where the memory the node offers was read (nodeMemory)
	reapMu       sync.Mutex
	reaping      map[string]bool
	restarting   map[string]bool // actors whose restart after node loss this node runs now (restartOrBury)
	left         sync.Map        // node id -> time its Leave event arrived
	args         argStore        // large spawn arguments this node offers (args.go)
	clockMu      sync.Mutex
	clocks       map[string]clockNote // node id -> its clock against ours (noteClock)
	// lost: members lost without leaving (crashed, or cut off by a
	// partition), by node id, while reconnectFor lasts; reconnecting: the
	// ids whose Join is under way. Both under lmu.
	lmu          sync.Mutex
	lost         map[string]lostMember
	reconnecting map[string]bool
	lastLoss     atomic.Int64 // when the latest member was lost without leaving (unix ns)
	gossipNet    *cappedTransport

	events       chan memberlist.NodeEvent
	reconcileNow chan struct{}   // a node left: reconcile without waiting for the tick
	warn         ratelog.Limiter // warnings about what the network sent
	stopped      chan struct{}
	stopMu       sync.Mutex
	isDone       bool
	leaving      bool

	// While the node joins, its own record stays out of the state it
	// sends, and takenBy is set when a live member already has its id.
	joining atomic.Bool
	takenBy atomic.Pointer[string]
	// wireRefused is set when a join met a member of another wire
	// protocol (wire.go).
	wireRefused atomic.Pointer[error]
	// tasks are the tasks running here (task.go), each's cancel by id.
	tmu   sync.Mutex
	tasks map[string]context.CancelFunc
	build string // buildinfo.String()
}

type memberInfo struct {
	id, gossip, actor string
}

// lostMember is a member lost without leaving: where it was, and since when.
type lostMember struct {
	gossip string
	since  time.Time
	// ended: its host refused a connection on its gossip port (a crash,
	// a SIGKILL), so it is not cut off: it no longer counts for
	// hasQuorum. Such a member is still tried only when its address is
	// one this node joined through (isJoinAddress): a node started again
	// there (the first node, by the same `rlnode start`) joins no one by
	// itself, while any other restarted node joins through that address.
	ended bool
}

// gossipToTheDead, when set (by tests), replaces memberlist's 30 s during
// which a node still gossips to members it declared dead: a partition
// shorter than that heals without reconnect.
var gossipToTheDead time.Duration

const (
	// reconnectFor is how long a node keeps trying to join a member lost
	// without leaving, as Serf does: memberlist alone never probes a
	// member it declared dead, so after a partition longer than its
	// gossip-to-the-dead window (30 s) each side went on without the
	// other for good, both sides' nodes ALIVE in their own status only.
	reconnectFor = 24 * time.Hour
	// lostQuorumFor is how long a lost member still counts as one of the
	// cluster's nodes for hasQuorum: after it, a node that lost most of
	// the cluster at once (a crash of most nodes) takes them for gone.
	lostQuorumFor = 10 * time.Minute
)

// nodeMeta is memberlist's per-node metadata (at most 512 bytes).
type nodeMeta struct {
	ID    string `msgpack:"i"`
	Actor string `msgpack:"a"`
	// Wire is the node's wire protocol (wire.go), Build its build
	// (buildinfo.String).
	Wire  int    `msgpack:"w,omitempty"`
	Build string `msgpack:"b,omitempty"`
}

// Start starts a node: it joins cfg.Join if given, or begins a new cluster.
func Start(ctx context.Context, cfg Config) (*Node, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Bind == "" {
		cfg.Bind = "127.0.0.1:0"
	}
	if cfg.Detection == (Detection{}) {
		cfg.Detection = FastDetection
	}
	if cfg.Detection.OwnerGrace <= 0 {
		cfg.Detection.OwnerGrace = FastDetection.OwnerGrace
	}
	if cfg.Detection.Unresponsive == 0 {
		d, err := actor.BoundFromEnv(UnresponsiveEnv)
		if err != nil {
			return nil, fmt.Errorf("start node: %w", err)
		}
		cfg.Detection.Unresponsive = cmp.Or(d, DefaultUnresponsive)
	}
	if cfg.Detection.OwnerGrace > MaxOwnerGrace {
		return nil, fmt.Errorf("Detection.OwnerGrace %v: want at most %v", cfg.Detection.OwnerGrace, MaxOwnerGrace)
	}
	if cfg.JoinTimeout <= 0 {
		cfg.JoinTimeout = 10 * time.Second
	}
	if cfg.NodeID == "" {
		cfg.NodeID = defaultNodeID()
	}
	switch {
	case len(cfg.Key) == 0 && len(cfg.Join) > 0:
		return nil, fmt.Errorf("join %v: no cluster key given (the key file of the node that started the cluster)", cfg.Join)
	case len(cfg.Key) == 0:
		cfg.Key = make([]byte, 32)
		_, _ = rand.Read(cfg.Key)
	case len(cfg.Key) != 16 && len(cfg.Key) != 24 && len(cfg.Key) != 32:
		return nil, fmt.Errorf("gossip key is %d bytes; want 16, 24 or 32", len(cfg.Key))
	}
	for _, j := range cfg.Join {
		if err := checkJoinAddr(j); err != nil {
			return nil, err
		}
	}
	if !validAmount(cfg.CPUs) {
		return nil, fmt.Errorf("CPUs %v: want a finite number ≥ 0 (0: every core)", cfg.CPUs)
	}
	if err := cfg.Resources.Check(); err != nil {
		return nil, fmt.Errorf("node resources: %w", err)
	}
	if err := cfg.ConnsPerAddr.check(); err != nil {
		return nil, err
	}
	if cfg.ObjectStoreBytes < 0 {
		return nil, fmt.Errorf("ObjectStoreBytes %d: want 0 (the default, %d) or more", cfg.ObjectStoreBytes, DefaultObjectStoreBytes)
	}
	if cfg.ObjectSpillBytes < NoObjectSpill {
		return nil, fmt.Errorf("ObjectSpillBytes %d: want 0 (the default: as much as ObjectStoreBytes), more, or NoObjectSpill (%d)", cfg.ObjectSpillBytes, NoObjectSpill)
	}
	if _, ok := cfg.Resources[Memory]; ok {
		return nil, fmt.Errorf("node resources: %w", errMemoryResource)
	}
	for k, flag := range map[string]string{CPU: "--cpus N (Config.CPUs)", GPU: "--gpus auto|N (Config.GPUs)"} {
		if _, ok := cfg.Resources[k]; ok {
			// Copied over the total, it would silently replace --cpus or
			// --gpus, and a GPU count would disagree with the GPU list.
			return nil, fmt.Errorf("node resources: %q is not a custom resource: give it with %s", k, flag)
		}
	}
	memory, memoryFrom, err := nodeMemory(cfg.Memory)
	if err != nil {
		return nil, fmt.Errorf("node memory: %w", err)
	}
	host, portStr, err := net.SplitHostPort(cfg.Bind)
	if err != nil {
		return nil, fmt.Errorf("bind address %q: %w", cfg.Bind, addrReason(err))
	}
	port, err := strconv.Atoi(portStr)
	if err != nil || port < 0 || port > 65535 {
		return nil, fmt.Errorf("bind address %q: bad port", cfg.Bind)
	}
	if (host == "0.0.0.0" || host == "" || host == "::") && cfg.Advertise == "" {
		if cfg.Advertise, err = advertiseHost(host, cfg.Join); err != nil {
			return nil, fmt.Errorf("bind %s: %w", cfg.Bind, err)
		}
	}
	advertised := cfg.Advertise
	if advertised == "" {
		advertised = host
	}
	for _, j := range cfg.Join {
		if msg := familyMismatch(advertised, j); msg != "" {
			cfg.Logger.Warn(msg)
			break
		}
	}
	total := Resources{CPU: cfg.CPUs, Memory: memory}
	if cfg.CPUs <= 0 {
		total[CPU] = float64(runtime.NumCPU())
	}
	if cfg.NoResources {
		total[CPU] = 0
	}
	var gpus []GPUInfo
	switch {
	case cfg.GPUs < 0:
		if gpus, err = DetectGPUs(ctx); err != nil {
			return nil, err
		}
		total[GPU] = float64(len(gpus))
	default:
		total[GPU] = float64(cfg.GPUs)
		for i := 0; i < cfg.GPUs; i++ {
			gpus = append(gpus, GPUInfo{Index: i, Name: "declared"})
		}
	}
	for k, v := range cfg.Resources {
		total[k] = v
	}

	n := &Node{
		cfg:          cfg,
		id:           cfg.NodeID,
		log:          cfg.Logger.With("node", cfg.NodeID),
		dir:          newDirectory(),
		members:      map[string]memberInfo{},
		watchers:     map[string][]chan ActorRecord{},
		changed:      make(chan struct{}),
		missing:      map[string]time.Time{},
		ownerMissing: map[string]time.Time{},
		clocks:       map[string]clockNote{},
		reaping:      map[string]bool{},
		restarting:   map[string]bool{},
		lost:         map[string]lostMember{},
		reconnecting: map[string]bool{},
		building:     map[string]*nodeBuild{},
		events:       make(chan memberlist.NodeEvent, 256),
		build:        buildinfo.String(),
		reconcileNow: make(chan struct{}, 1),
		stopped:      make(chan struct{}),
	}
	n.started = n.now()
	n.bornMs = time.Now().UnixMilli()
	n.ledger.init(total, gpus)
	n.gpuList = gpus
	n.dir.onActor = n.onActorChange
	n.dir.onGroup = n.onGroupChange
	sweepSpill(n.spillRoot(), n.log)

	actorHost, actorPort := host, 0
	if cfg.ActorBind != "" {
		h, p, err := net.SplitHostPort(cfg.ActorBind)
		if err != nil {
			return nil, fmt.Errorf("actor bind address %q: %w", cfg.ActorBind, addrReason(err))
		}
		actorHost = h
		if actorPort, err = strconv.Atoi(p); err != nil {
			return nil, fmt.Errorf("actor bind address %q: bad port", cfg.ActorBind)
		}
	}
	n.sys, err = actor.Start(actor.Config{
		Host: actorHost, Port: actorPort, AdvertiseHost: cfg.Advertise, TLS: cfg.TLS, Secret: cfg.Key, Logger: n.log,
		MaxConnsPerAddr: cfg.ConnsPerAddr.Actor, BulkStall: cfg.BulkStall,
	})
	if err != nil {
		return nil, err
	}
	n.sys.SetPeerFilter(n.isMemberAddress)
	n.sys.SetPeerLeaving(n.dir.leavingAt)
	n.sys.SetObserver(n.onLocalEvent)
	if _, err := n.sys.SpawnLocal(actor.LocalSpawn{Name: nodeActorName, Kind: nodeActorKind, Factory: n.nodeActorFactory, MaxRestarts: -1}); err != nil {
		n.sys.Stop()
		return nil, err
	}

	mc := memberlist.DefaultLANConfig()
	mc.Name = cfg.NodeID
	mc.BindAddr, mc.BindPort = host, port
	if cfg.Advertise != "" {
		mc.AdvertiseAddr = cfg.Advertise
	}
	mc.SecretKey = cfg.Key
	mc.ProbeInterval = cfg.Detection.ProbeInterval
	mc.ProbeTimeout = cfg.Detection.ProbeTimeout
	mc.SuspicionMult = cfg.Detection.SuspicionMult
	mc.GossipInterval = cfg.Detection.GossipInterval
	mc.PushPullInterval = cfg.Detection.PushPull
	mc.TCPTimeout = cfg.JoinTimeout
	// A node restarted under the same id (new ports) may rejoin soon after
	// its old self was declared dead.
	mc.DeadNodeReclaimTime = 2 * time.Second
	if gossipToTheDead > 0 {
		mc.GossipToTheDeadTime = gossipToTheDead
	}
	mc.Delegate = &gossipDelegate{n: n}
	mc.Conflict = &gossipDelegate{n: n}
	if checkWires {
		mc.Merge = wireDelegate{n: n}
		mc.Alive = wireDelegate{n: n}
	}
	mc.Ping = clockDelegate{n: n}
	mc.Events = &memberlist.ChannelEventDelegate{Ch: n.events}
	mc.Logger = log.New(&slogWriter{l: n.log, warn: &n.warn, stopping: n.stopping}, "", 0)
	gt, err := newGossipTransport(host, port, orDefault(cfg.ConnsPerAddr.Gossip, DefaultGossipConnsPerAddr), mc.Logger, func(peer string, err error) {
		n.warn.Warn(n.log, "gossip: refusing a connection", "peer", peer, "err", err)
	})
	if err != nil {
		n.sys.Stop()
		return nil, err
	}
	mc.Transport = gt
	n.gossipNet = gt
	if port == 0 {
		mc.BindPort = gt.GetAutoBindPort()
		mc.AdvertisePort = mc.BindPort
	}
	n.ml, err = memberlist.Create(mc)
	if err != nil {
		_ = gt.Shutdown()
		n.sys.Stop()
		return nil, fmt.Errorf("gossip on %s: %w", cfg.Bind, err)
	}
	n.queue = &memberlist.TransmitLimitedQueue{NumNodes: n.ml.NumMembers, RetransmitMult: 3}
	nodesBySystem.Store(n.sys, n) // from here on a failed start ends in shutdown, which removes it
	// Count ourselves a member at once, so an embedded node can place actors
	// as soon as Start returns (the join event arrives asynchronously).
	n.members[n.id] = memberInfo{id: n.id, gossip: n.GossipAddress(), actor: n.sys.Address()}
	if len(cfg.Join) > 0 {
		// Others learn of this node's record once the join has shown its
		// id is free (join), not before: a record under a taken id would
		// replace the live holder's in their directories.
		n.joining.Store(true)
		n.dir.merge(&update{Nodes: []NodeRecord{n.nodeRecord()}})
	} else {
		n.publishNode()
	}
	go n.eventLoop()
	go n.reconcileLoop()
	go n.reconnectLoop()
	go n.livenessLoop()

	if len(cfg.Join) > 0 {
		if err := n.join(ctx, cfg.Join); err != nil {
			n.shutdown()
			return nil, err
		}
	}
	n.memoryFrom = memoryFrom
	return n, nil
}

func (n *Node) join(ctx context.Context, addrs []string) error {
	type res struct {
		k   int
		err error
	}
	ch := make(chan res, 1)
	go func() {
		k, err := n.ml.Join(addrs)
		ch <- res{k, err}
	}()
	ctx, cancel := context.WithTimeout(ctx, n.cfg.JoinTimeout+2*time.Second)
	defer cancel()
	select {
	case r := <-ch:
		if p := n.wireRefused.Load(); p != nil {
			return fmt.Errorf("join %s: %w", strings.Join(addrs, ", "), *p)
		}
		if r.err != nil && r.k == 0 {
			return fmt.Errorf("join %s: no member answered (wrong address, or a gossip key that does not match the cluster's): %w", strings.Join(addrs, ", "), joinErr{r.err})
		}
		// Memberlist keeps the live holder of a taken id and ignores this
		// node, which would run on unseen by the others.
		if other := n.takenBy.Load(); other != nil {
			return fmt.Errorf("join %v: node id %q is taken: a live member of the cluster has it at %s; choose another node id, or stop that node first (one just killed frees its id once the cluster notices: about 1 s with fast detection, 11 s with lan)", addrs, n.id, *other)
		}
		n.joining.Store(false)
		n.publishNode()
		// The members joined through get the record at once, as the state
		// exchange gave it them; the others by gossip, as ever.
		n.sendRecordTo(addrs)
		// Let the event loop take in the members the join brought, so that
		// placement sees them when Start returns.
		for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
			n.mmu.RLock()
			k := len(n.members)
			n.mmu.RUnlock()
			if k >= n.ml.NumMembers() {
				break
			}
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("join %s: no member answered within %s", strings.Join(addrs, ", "), n.cfg.JoinTimeout)
	}
}

// checkJoinAddr refuses a join address that is not HOST:PORT with a port
// from 1 to 65535. Memberlist dials an address without a port on this
// node's own gossip port, so the node would join itself and run alone.
func checkJoinAddr(addr string) error {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("join address %q: want HOST:PORT, a member's gossip address (e.g. 10.0.0.1:7946): %w", addr, addrReason(err))
	}
	if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
		return fmt.Errorf("join address %q: want HOST:PORT, a member's gossip address (e.g. 10.0.0.1:7946): port %q is not 1 to 65535", addr, port)
	}
	return nil
}

// addrReason is what is wrong with an address net.SplitHostPort refused,
// without the address, which the caller names already.
func addrReason(err error) error {
	var ae *net.AddrError
	if errors.As(err, &ae) {
		return errors.New(ae.Err)
	}
	return err
}

// joinErr is memberlist's join error on one line: it comes as a bulleted
// list, one error per address ("1 error occurred:\n\t* failed to join
// …\n\n"), which ended a CLI's one-line error with blank lines. Each
// item says "failed to join ADDR: dial tcp ADDR: REASON"; the join error
// around it names the addresses already, so an item keeps its address
// once, and with a single address not at all.
type joinErr struct{ err error }

func (e joinErr) Unwrap() error { return e.err }

func (e joinErr) Error() string {
	var list interface{ WrappedErrors() []error }
	if !errors.As(e.err, &list) {
		return strings.Join(strings.Fields(e.err.Error()), " ")
	}
	ws := list.WrappedErrors()
	var parts []string
	for _, w := range ws {
		msg := strings.Join(strings.Fields(w.Error()), " ")
		if rest, ok := strings.CutPrefix(msg, "failed to join "); ok {
			if addr, reason, ok := strings.Cut(rest, ": "); ok {
				reason = strings.TrimPrefix(reason, "dial tcp "+addr+": ")
				msg = addr + ": " + reason
				if len(ws) == 1 {
					msg = reason
				}
			}
		}
		parts = append(parts, msg)
	}
	return strings.Join(parts, "; ")
}

func defaultNodeID() string {
	h, _ := os.Hostname()
	if h == "" {
		h = "node"
	}
	var b [3]byte
	_, _ = rand.Read(b[:])
	return h + "-" + hex.EncodeToString(b[:])
}

// ID is this node's id.
func (n *Node) ID() string { return n.id }

// Logger is the node's logger (Config.Logger, with the node's id).
func (n *Node) Logger() *slog.Logger { return n.log }

// Key is the cluster key the node runs under: the one its Config gave, or
// the one made for it. Whoever holds it is a member.
func (n *Node) Key() []byte { return append([]byte(nil), n.cfg.Key...) }

// GossipAddress is the address other nodes join.
func (n *Node) GossipAddress() string {
	ln := n.ml.LocalNode()
	return net.JoinHostPort(ln.Addr.String(), strconv.Itoa(int(ln.Port)))
}

// ActorAddress is the actor transport's address.
func (n *Node) ActorAddress() string { return n.sys.Address() }

// System is the node's actor system (for Call/Tell on raw refs and Bulk).
// Resources are what this node offers and what of it is free now.
func (n *Node) Resources() (total, free Resources) {
	total, used := n.ledger.snapshot()
	return total, total.Sub(used)
}

// Memory is the memory the node offers (the resource Memory, bytes) and
// where that figure comes from ("MemTotal of /proc/meminfo", a cgroup's
// limit, the configuration).
func (n *Node) Memory() (bytes float64, from string) {
	total, _ := n.ledger.snapshot()
	return total[Memory], n.memoryFrom
}

func (n *Node) System() *actor.System { return n.sys }

// Directory is the node's copy of the cluster directory.
func (n *Node) Directory() *Directory { return n.dir }

// Done is closed when the node has stopped.
func (n *Node) Done() <-chan struct{} { return n.stopped }

// Stop leaves the cluster gracefully: local actors stop first (their
// records say so), then the node leaves the gossip and shuts down.
func (n *Node) Stop() {
	n.stopMu.Lock()
	if n.isDone || n.leaving {
		n.stopMu.Unlock()
		<-n.stopped
		return
	}
	n.leaving = true
	n.stopMu.Unlock()

	n.publishNode() // now says Leaving
	n.cancelBuilds("node stopped", 10*time.Second)
	n.cancelTasks()
	n.waitTasks(5 * time.Second)
	// All at once: each may take up to 10 s to stop (an actor busy in
	// Receive), and one after another they added up.
	var wg sync.WaitGroup
	for _, ref := range n.sys.Local() {
		if ref.Name != nodeActorName {
			wg.Go(func() { _ = n.sys.StopLocal(ref.Name, "node stopped") })
		}
	}
	wg.Wait()
	// The leaving record and the death records must reach the others
	// before memberlist's leave does, or the leader takes the stop for a
	// crash ("node lost"). Gossip alone may lag behind the leave on a
	// loaded host, so they also go to every member over TCP.
	n.sendReliable(n.ownRecords())
	n.flushBroadcasts(time.Second)
	_ = n.ml.Leave(2 * time.Second)
	n.shutdown()
}

// stopping says whether Stop has begun.
func (n *Node) stopping() bool {
	n.stopMu.Lock()
	defer n.stopMu.Unlock()
	return n.leaving || n.isDone
}

func (n *Node) flushBroadcasts(max time.Duration) {
	deadline := time.Now().Add(max)
	for n.queue.NumQueued() > 0 && time.Now().Before(deadline) && n.ml.NumMembers() > 1 {
		time.Sleep(20 * time.Millisecond)
	}
}

func (n *Node) shutdown() {
	n.stopMu.Lock()
	if n.isDone {
		n.stopMu.Unlock()
		return
	}
	n.isDone = true
	n.stopMu.Unlock()
	_ = n.ml.Shutdown()
	n.sys.Stop()
	n.closeObjects()
	nodesBySystem.Delete(n.sys)
	close(n.stopped)
}

// nodesBySystem maps each running node's actor system to the node, for
// ActorNode.
var nodesBySystem sync.Map

// ActorNode is the node an actor runs on, from its Context (nil for an
// actor system no Node started): what its Receive reads objects with
// (Get), spawns or submits through.
func ActorNode(ctx *actor.Context) *Node {
	n, _ := nodesBySystem.Load(ctx.System())
	node, _ := n.(*Node)
	return node
}

// isMemberAddress is the actor system's peer filter: only alive members'
// actor addresses may send.
func (n *Node) isMemberAddress(addr string) bool {
	n.mmu.RLock()
	defer n.mmu.RUnlock()
	for _, m := range n.members {
		if m.actor == addr {
			return true
		}
	}
	return false
}

// aliveIDs returns the ids of alive members, sorted.
func (n *Node) aliveIDs() []string {
	n.mmu.RLock()
	defer n.mmu.RUnlock()
	out := make([]string, 0, len(n.members))
	for id := range n.members {
		out = append(out, id)
	}
	sort.Strings(out)
	return out
}

func (n *Node) isAlive(id string) bool {
	n.mmu.RLock()
	defer n.mmu.RUnlock()
	_, ok := n.members[id]
	return ok
}

// eventLoop applies membership events outside memberlist's callbacks.
func (n *Node) eventLoop() {
	for {
		select {
		case <-n.stopped:
			return
		case ev := <-n.events:
			var meta nodeMeta
			if err := unmarshalChecked(ev.Node.Meta, &meta); err != nil || meta.ID == "" {
				n.log.Warn("ignoring member with unreadable metadata", "member", ev.Node.Name, "err", err)
				continue
			}
			info := memberInfo{id: meta.ID, gossip: ev.Node.Address(), actor: meta.Actor}
			switch ev.Event {
			case memberlist.NodeJoin, memberlist.NodeUpdate:
				n.mmu.Lock()
				n.members[meta.ID] = info
				n.mmu.Unlock()
				n.left.Delete(meta.ID)
				n.lmu.Lock()
				delete(n.lost, meta.ID)
				n.lmu.Unlock()
				if ev.Event == memberlist.NodeJoin && meta.ID != n.id {
					n.log.Info("node joined", "member", meta.ID, "gossip", info.gossip)
				}
			case memberlist.NodeLeave:
				n.mmu.Lock()
				delete(n.members, meta.ID)
				n.mmu.Unlock()
				n.left.Store(meta.ID, time.Now())
				if meta.ID == n.id {
					continue
				}
				// A node that stops in order says so (its record is Leaving)
				// before it leaves the gossip: that is news, not trouble.
				if rec, ok := n.dir.Node(meta.ID); ok && rec.Leaving {
					n.log.Info("node left", "member", meta.ID, "gossip", info.gossip)
				} else {
					n.log.Warn("node lost", "member", meta.ID, "gossip", info.gossip)
					n.lmu.Lock()
					n.lost[meta.ID] = lostMember{gossip: info.gossip, since: time.Now()}
					n.lmu.Unlock()
					n.lastLoss.Store(time.Now().UnixNano())
				}
				n.sys.ForgetAddress(meta.Actor, fmt.Errorf("node %s (%s): %w", meta.ID, meta.Actor, actor.ErrNodeLost))
				// Not here: a restart waits for its actor's build (a model
				// load), and this loop must go on taking in membership.
				select {
				case n.reconcileNow <- struct{}{}:
				default: // a pass is due already
				}
			}
		}
	}
}

func (n *Node) reconcileLoop() {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-n.stopped:
			return
		case <-t.C:
			n.forgetPreviousLife()
			n.reconcile()
			n.dir.collect(time.Now().Add(-deadRecordTTL), n.isAlive)
			n.releaseArgs()
		case <-n.reconcileNow:
			n.reconcile()
		}
	}
}

// reconnectLoop tries, every push/pull interval, to join again the
// members lost without leaving (reconnect).
func (n *Node) reconnectLoop() {
	t := time.NewTicker(n.cfg.Detection.PushPull)
	defer t.Stop()
	for {
		select {
		case <-n.stopped:
			return
		case <-t.C:
			n.reconnect(time.Now())
		}
	}
}

// reconnect starts a join of each lost member's gossip address, one at a
// time per member, for reconnectFor after it was lost. When a partition
// heals, the join brings both sides' memberships and directories
// together again; when the node this node joined through is killed and
// started again at the same address, the join brings it into the cluster
// (as Serf reconnects failed members; a killed member at any other
// address is dropped once its host refuses, see lostMember.ended). A member whose record says it was stopping, or whose
// address another live member has now, is no longer tried.
func (n *Node) reconnect(now time.Time) {
	if n.isLeaving() {
		return
	}
	taken := map[string]bool{}
	n.mmu.RLock()
	for _, m := range n.members {
		taken[m.gossip] = true
	}
	n.mmu.RUnlock()
	n.lmu.Lock()
	defer n.lmu.Unlock()
	for id, l := range n.lost {
		if rec, ok := n.dir.Node(id); now.Sub(l.since) > reconnectFor || taken[l.gossip] || ok && rec.Leaving {
			delete(n.lost, id)
			continue
		}
		if n.reconnecting[id] {
			continue
		}
		n.reconnecting[id] = true
		go func() {
			refused := false
			if c, err := net.DialTimeout("tcp", l.gossip, n.cfg.JoinTimeout); err == nil {
				c.Close()
				if _, err := n.ml.Join([]string{l.gossip}); err == nil {
					n.log.Info("joined a lost node again", "member", id, "gossip", l.gossip)
				}
			} else {
				refused = errors.Is(err, syscall.ECONNREFUSED)
			}
			retry := refused && n.isJoinAddress(l.gossip) // a name lookup: not under lmu
			n.lmu.Lock()
			delete(n.reconnecting, id)
			if cur, ok := n.lost[id]; ok && refused && !cur.ended {
				// Its host answers and nothing listens there: the node
				// ended (a crash, a SIGKILL), it is not cut off. It no
				// longer counts for hasQuorum. A join address is still
				// tried, for the node started again there; any other is
				// dropped, as its port may be another process's by now.
				if retry {
					cur.ended = true
					n.lost[id] = cur
				} else {
					delete(n.lost, id)
				}
			}
			n.lmu.Unlock()
		}()
	}
}

// isJoinAddress reports whether gossip (host:port as memberlist gives it)
// is one of the addresses this node was started to join (Config.Join),
// names resolved.
func (n *Node) isJoinAddress(gossip string) bool {
	for _, a := range n.cfg.Join {
		if a == gossip {
			return true
		}
		host, port, err := net.SplitHostPort(a)
		if err != nil {
			continue
		}
		ips, err := net.LookupHost(host)
		if err != nil {
			continue
		}
		for _, ip := range ips {
			if net.JoinHostPort(ip, port) == gossip {
				return true
			}
		}
	}
	return false
}

// hasQuorum reports whether this node sees at least half of the
// cluster's nodes: those alive and those lost without leaving in the last
// lostQuorumFor. A node that sees fewer may be the one cut off (a
// partition, a firewall that lets it send but not receive): it must not
// take the others' actors for lost, as what it writes reaches them as
// soon as it can send, and their hosts would stop actors that run.
func (n *Node) hasQuorum(now time.Time) bool {
	alive := len(n.aliveIDs())
	lost := 0
	n.lmu.Lock()
	for id, l := range n.lost {
		if !l.ended && now.Sub(l.since) < lostQuorumFor && !n.isAlive(id) {
			lost++
		}
	}
	n.lmu.Unlock()
	return 2*alive >= alive+lost
}

// lossSettle is how long membership must go without a new loss before
// the leader handles the lost nodes. A node cut off from the others loses
// them one after another, as its probes reach each in turn; before they
// are all gone it still seems to see half of them (hasQuorum).
func (n *Node) lossSettle() time.Duration {
	return max(missingGrace, 10*n.cfg.Detection.ProbeInterval)
}

// settling reports whether a member was lost less than lossSettle ago.
func (n *Node) settling(now time.Time) bool {
	return now.Sub(time.Unix(0, n.lastLoss.Load())) < n.lossSettle()
}

// leader is the alive node with the lowest id: it alone restarts actors of
// lost nodes, so a loss is handled once.
func (n *Node) isLeader() bool {
	ids := n.aliveIDs()
	return len(ids) > 0 && ids[0] == n.id
}

// broadcast sends changed records to the other members: as gossip, or
// over memberlist's TCP path when too big for a gossip packet.
func (n *Node) broadcast(u *update) { n.send(u, false) }

// sendReliable sends u to every other member over memberlist's TCP path.
func (n *Node) sendReliable(u *update) { n.send(u, true) }

func (n *Node) send(u *update, reliable bool) {
	if u.empty() {
		return
	}
	b, err := encodeUpdate(u)
	if err != nil {
		n.log.Error("encode directory update", "err", err)
		return
	}
	msg := append([]byte{gossipUpdate}, b...)
	if !reliable && len(msg) <= maxGossipUpdate {
		n.queue.QueueBroadcast(newBroadcast(u, msg))
		return
	}
	n.sendReliableMsg(msg)
}

// sendReliableMsg sends msg to every other member at once and returns when
// each send is done, so one unreachable member (up to its TCP timeout)
// does not hold up the others.
func (n *Node) sendReliableMsg(msg []byte) {
	local := n.ml.LocalNode().Name
	var wg sync.WaitGroup
	for _, m := range n.ml.Members() {
		if m.Name == local {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := n.ml.SendReliable(m, msg); err != nil {
				n.log.Warn("send directory update", "member", m.Name, "err", err)
			}
		}()
	}
	wg.Wait()
}

// sendRecordTo sends this node's records over TCP to the members at the
// gossip addresses addrs.
func (n *Node) sendRecordTo(addrs []string) {
	b, err := encodeUpdate(n.ownRecords())
	if err != nil {
		n.log.Error("encode directory update", "err", err)
		return
	}
	msg := append([]byte{gossipUpdate}, b...)
	local := n.ml.LocalNode().Name
	for _, m := range n.ml.Members() {
		if m.Name != local && slices.Contains(addrs, m.Address()) {
			if err := n.ml.SendReliable(m, msg); err != nil {
				n.log.Warn("send directory update", "member", m.Name, "err", err)
			}
		}
	}
}

// write stores records this node authored and gossips them.
func (n *Node) write(u *update) {
	n.broadcast(n.dir.merge(u))
}

// publishNode writes this node's record (resources, labels).
func (n *Node) publishNode() {
	rec := n.nodeRecord()
	n.write(&update{Nodes: []NodeRecord{rec}})
}

// ownRecords is this node's record, those of the actors it hosts and
// those of the placement groups it wrote last (a group it removed just
// before it stops, as a run's driver does, must reach the others).
func (n *Node) ownRecords() *update {
	u := &update{}
	if rec, ok := n.dir.Node(n.id); ok {
		u.Nodes = append(u.Nodes, rec)
	}
	for _, rec := range n.dir.Actors() {
		if rec.Node == n.id {
			u.Actors = append(u.Actors, rec)
		}
	}
	for _, g := range n.dir.Groups() {
		if g.Writer == n.id {
			u.Groups = append(u.Groups, g)
		}
	}
	return u
}

func (n *Node) nodeRecord() NodeRecord {
	total, used := n.ledger.snapshot()
	old, _ := n.dir.Node(n.id)
	n.stopMu.Lock()
	leaving := n.leaving
	n.stopMu.Unlock()
	objects, objectBytes := n.Objects()
	rec := NodeRecord{
		ID: n.id, Actor: n.sys.Address(), Labels: n.cfg.Labels, Host: actor.HostID(), Total: total, Used: used,
		StartedMs: n.started.UnixMilli(), Leaving: leaving, Build: n.build, Tasks: n.runningTasks(), Objects: objects, ObjectBytes: objectBytes, ObjectSpilledBytes: n.SpilledObjectBytes(), OwnerGraceMs: n.cfg.Detection.OwnerGrace.Milliseconds(),
		// Wall-clock versions let a node restarted under the same id
		// supersede the records of its previous life.
		Version: max(old.Version+1, uint64(time.Now().UnixNano())),
	}
	if n.ml != nil {
		rec.Gossip = n.GossipAddress()
	}
	if n.cfg.GPUs < 0 || n.cfg.GPUs > 0 {
		rec.GPUs = n.gpus()
	}
	return rec
}

// gpus are the GPUs found (or declared) when the node started: detecting
// again runs nvidia-smi (up to 15 s) on every record this node publishes,
// from its node actor's loop and its actors' death events.
func (n *Node) gpus() []GPUInfo { return n.gpuList }

// Views returns placement's view of the alive nodes.
func (n *Node) Views() []NodeView {
	var out []NodeView
	for _, id := range n.aliveIDs() {
		rec, ok := n.dir.Node(id)
		if !ok || rec.Leaving {
			continue
		}
		out = append(out, NodeView{ID: id, Labels: rec.Labels, Total: rec.Total, Free: rec.Total.Sub(rec.Used)})
	}
	return out
}

// gossip wire tags.
const gossipUpdate byte = 1

// maxGossipUpdate is the largest update sent as gossip (in UDP packets);
// larger ones go over memberlist's TCP path.
const maxGossipUpdate = 1200

type gossipDelegate struct{ n *Node }

func (g *gossipDelegate) NodeMeta(limit int) []byte {
	b, _ := msgpack.Marshal(nodeMeta{ID: g.n.id, Actor: g.n.sys.Address(), Wire: spoken, Build: g.n.build})
	if len(b) > limit {
		return nil
	}
	return b
}

func (g *gossipDelegate) NotifyMsg(b []byte) {
	if len(b) < 2 || b[0] != gossipUpdate {
		g.n.warn.Warn(g.n.log, "dropping unknown gossip message", "len", len(b))
		return
	}
	u, err := decodeUpdate(b[1:])
	if err != nil {
		g.n.warn.Warn(g.n.log, "dropping a gossip update", "err", err)
		return
	}
	g.n.regossip(g.n.dir.merge(u))
}

// regossip passes on, once, the records an update changed here. A writer
// broadcasts a change only RetransmitMult × ⌈log10(N+1)⌉ times, so with
// six nodes or more some never heard of it until the next push/pull (5 s,
// 30 s with lan detection, never across a partition); every node that
// learns a change gossiping it too spreads it as an epidemic does, and
// stops, since a node that has a record already passes nothing on. A
// change too large for one gossip packet went to every member over TCP
// from its writer and is not sent again.
func (n *Node) regossip(changed *update) {
	if changed.empty() {
		return
	}
	b, err := encodeUpdate(changed)
	if err != nil || len(b)+1 > maxGossipUpdate {
		return
	}
	n.queue.QueueBroadcast(newBroadcast(changed, append([]byte{gossipUpdate}, b...)))
}

func (g *gossipDelegate) GetBroadcasts(overhead, limit int) [][]byte {
	return g.n.queue.GetBroadcasts(overhead, limit)
}

func (g *gossipDelegate) LocalState(join bool) []byte {
	u := g.n.dir.snapshot()
	if g.n.joining.Load() {
		u.Nodes = slices.DeleteFunc(u.Nodes, func(r NodeRecord) bool { return r.ID == g.n.id })
	}
	b, err := encodeUpdate(u)
	if err != nil {
		g.n.log.Error("encode directory state", "err", err)
		return nil
	}
	if len(b) > directoryStateWarn {
		g.n.warn.Warn(g.n.log, "directory state near memberlist's 20 MB limit, past which nodes cannot join or repair their state",
			"bytes", len(b), "actors", len(u.Actors), "groups", len(u.Groups), "nodes", len(u.Nodes))
	}
	return b
}

// directoryStateWarn is the size of the directory's push/pull state past
// which a node warns: memberlist refuses states over 20 MB.
const directoryStateWarn = 12 << 20

func (g *gossipDelegate) MergeRemoteState(buf []byte, join bool) {
	u, err := decodeUpdate(buf)
	if err != nil {
		g.n.warn.Warn(g.n.log, "dropping a directory state", "err", err)
		return
	}
	g.n.dir.merge(u)
}

// NotifyConflict is memberlist's report of a member announced under a
// name it already knows at another address; while this node joins, one
// under its own id means the id is taken.
func (g *gossipDelegate) NotifyConflict(existing, other *memberlist.Node) {
	if existing.Name == g.n.id && g.n.joining.Load() {
		addr := other.Address()
		g.n.takenBy.Store(&addr)
	}
}

// newBroadcast is msg, the encoded update u, for memberlist's queue. An
// update of one record is named after it, so that a newer version of the
// record queued later replaces it in the queue (what this node queues of
// one record comes in increasing versions: its own writes, and records
// that merge found newer). Any other is marked unique. Either way the
// queue does not scan itself on every insert: with plain broadcasts it
// did, and a node that wrote its record thousands of times a second (a
// task's start and end) spent most of its time there.
func newBroadcast(u *update, msg []byte) memberlist.Broadcast {
	switch {
	case len(u.Nodes) == 1 && len(u.Actors)+len(u.Groups) == 0:
		return &namedBroadcast{broadcast{msg}, "n/" + u.Nodes[0].ID}
	case len(u.Actors) == 1 && len(u.Nodes)+len(u.Groups) == 0:
		return &namedBroadcast{broadcast{msg}, "a/" + u.Actors[0].Name}
	case len(u.Groups) == 1 && len(u.Nodes)+len(u.Actors) == 0:
		return &namedBroadcast{broadcast{msg}, "g/" + u.Groups[0].ID}
	}
	return &uniqueBroadcast{broadcast{msg}}
}

type broadcast struct{ msg []byte }

func (b *broadcast) Message() []byte { return b.msg }
func (b *broadcast) Finished()       {}

// namedBroadcast carries one record (memberlist.NamedBroadcast).
type namedBroadcast struct {
	broadcast
	name string
}

func (b *namedBroadcast) Name() string { return b.name }
func (b *namedBroadcast) Invalidates(o memberlist.Broadcast) bool {
	nb, ok := o.(*namedBroadcast)
	return ok && nb.name == b.name
}

// uniqueBroadcast carries several records (memberlist.UniqueBroadcast).
type uniqueBroadcast struct{ broadcast }

func (b *uniqueBroadcast) UniqueBroadcast()                      {}
func (b *uniqueBroadcast) Invalidates(memberlist.Broadcast) bool { return false }

// slogWriter routes memberlist's log lines to slog at debug level, except
// errors, which are warnings limited per kind: junk sent to the gossip
// port (undecryptable packets, streams from non-members) logs one error
// per packet. Once the node stops, a send on the sockets it closed is
// part of stopping, not a fault (memberlist's probes race its shutdown).
type slogWriter struct {
	l        *slog.Logger
	warn     *ratelog.Limiter
	stopping func() bool
}

func (w *slogWriter) Write(p []byte) (int, error) {
	s := strings.TrimSpace(string(p))
	if rest, ok := strings.CutPrefix(s, "[ERR] memberlist: "); ok {
		if w.stopping != nil && strings.Contains(rest, net.ErrClosed.Error()) && w.stopping() {
			w.l.Debug(s)
			return len(p), nil
		}
		w.warn.Warn(w.l, "memberlist: "+memberlistKind(rest), "line", rest)
		return len(p), nil
	}
	w.l.Debug(s)
	return len(p), nil
}

// memberlistKind is the fixed part of a memberlist error line, the words
// before the first that carries an error text, a number or an address:
// "Decrypt packet failed: … from=…" is of kind "Decrypt packet failed",
// "UDP packet too short (3 bytes) from=…" of "UDP packet too short".
func memberlistKind(line string) string {
	var kind []string
	for _, w := range strings.Fields(line) {
		word, last := strings.CutSuffix(w, ":")
		if word == "" || strings.ContainsFunc(word, func(r rune) bool {
			return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r == '/' || r == '-')
		}) {
			break
		}
		kind = append(kind, word)
		if last {
			break
		}
	}
	return strings.Join(kind, " ")
}

var _ io.Writer = (*slogWriter)(nil)
