package cluster

import (
	"fmt"
	"sync"
	"time"

	"github.com/rlnode/rlnode/actor"
	"github.com/vmihailenco/msgpack/v5"
)

// The directory is the cluster's replicated view of nodes, actors and
// placement groups. Every node holds a full copy; changes travel as gossip
// broadcasts and a periodic full push/pull repairs what a broadcast missed.
// Merging is pure: a record with a higher Version replaces a lower one, and
// equal versions are ordered by Writer so every node converges on the same
// record (the rule is in newer).

// ActorState is an actor's life state as `rlnode status` shows it.
type ActorState string

const (
	Alive      ActorState = "ALIVE"
	Restarting ActorState = "RESTARTING"
	Dead       ActorState = "DEAD"
)

// ActorRecord is the directory's entry for one named actor.
type ActorRecord struct {
	Name        string     `msgpack:"n" json:"name"`
	Kind        string     `msgpack:"k" json:"kind"`
	Node        string     `msgpack:"o" json:"node"`
	Ref         actor.Ref  `msgpack:"r" json:"-"`
	State       ActorState `msgpack:"s" json:"state"`
	Restarts    int        `msgpack:"rs" json:"restarts"`
	MaxRestarts int        `msgpack:"mr" json:"max_restarts"`
	// MaxConcurrency is SpawnOptions.MaxConcurrency (0: one at a time).
	MaxConcurrency int `msgpack:"mc,omitempty" json:"max_concurrency,omitempty"`
	// MaxCallRetries is SpawnOptions.MaxCallRetries (0: calls never sent twice).
	MaxCallRetries int               `msgpack:"cr,omitempty" json:"max_call_retries,omitempty"`
	Cause          string            `msgpack:"c,omitempty" json:"death_cause,omitempty"`
	Resources      Resources         `msgpack:"re,omitempty" json:"resources,omitempty"`
	Labels         map[string]string `msgpack:"l,omitempty" json:"labels,omitempty"`
	PinNode        string            `msgpack:"p,omitempty" json:"-"`
	// Owner is the node whose process spawned the actor (SpawnOptions.
	// Detached: none): the actor shares its fate (reapOrphans).
	Owner    string `msgpack:"ow,omitempty" json:"owner,omitempty"`
	Group    string `msgpack:"g,omitempty" json:"placement_group,omitempty"`
	Bundle   int    `msgpack:"b,omitempty" json:"bundle,omitempty"`
	ArgsType string `msgpack:"at,omitempty" json:"-"`
	Args     []byte `msgpack:"a,omitempty" json:"-"`
	// ArgsAt replaces Args when they are over InlineArgsMax: they stay on
	// the spawning node (args.go).
	ArgsAt    *argsRef `msgpack:"aa,omitempty" json:"-"`
	Version   uint64   `msgpack:"v" json:"-"`
	Writer    string   `msgpack:"w" json:"-"`
	UpdatedMs int64    `msgpack:"u" json:"updated_unix_ms"`

	// RestartTimeoutMs bounds a restart after node loss
	// (SpawnOptions.RestartTimeout; 0: DefaultRestartTimeout).
	RestartTimeoutMs int64 `msgpack:"rt,omitempty" json:"-"`
	// KeepDeadMs is how long the record is kept once DEAD, when longer
	// than deadRecordTTL (SpawnOptions.KeepDead).
	KeepDeadMs int64 `msgpack:"kd,omitempty" json:"-"`
	// Note is what an ALIVE actor says it is doing or waiting for
	// (Node.SetNote); cleared when its state changes.
	Note string `msgpack:"nt,omitempty" json:"note,omitempty"`
	// Forgotten marks a DEAD record its user asked the cluster to forget
	// (Node.Forget): gone from status and Record at once, from every
	// directory deadRecordTTL later (a node that missed the forgetting
	// must not bring the earlier version back meanwhile).
	Forgotten bool `msgpack:"fg,omitempty" json:"-"`
}

// NodeRecord is the directory's entry for one node: what does not fit in
// memberlist's 512-byte node metadata.
type NodeRecord struct {
	ID     string            `msgpack:"id"`
	Gossip string            `msgpack:"g"`
	Actor  string            `msgpack:"a"`
	Labels map[string]string `msgpack:"l,omitempty"`
	// Host is the node's host identity (actor.HostID): nodes with the same
	// one may share memory, which their bulk paths check by opening each
	// other's same-host socket before they use it.
	Host      string    `msgpack:"h,omitempty"`
	GPUs      []GPUInfo `msgpack:"gp,omitempty"`
	Total     Resources `msgpack:"t"`
	Used      Resources `msgpack:"u"`
	StartedMs int64     `msgpack:"s"`
	Leaving   bool      `msgpack:"lv,omitempty"`
	// Build is the node's build (buildinfo.String).
	Build string `msgpack:"bd,omitempty"`
	// Tasks is how many tasks run on the node (task.go).
	Tasks int `msgpack:"tk,omitempty"`
	// Objects and ObjectBytes are the objects the node holds (Put).
	Objects     int   `msgpack:"ob,omitempty"`
	ObjectBytes int64 `msgpack:"obb,omitempty"`
	// ObjectSpilledBytes is what of them it wrote to its spill folder.
	ObjectSpilledBytes int64  `msgpack:"obs,omitempty"`
	Version            uint64 `msgpack:"v"`

	// OwnerGraceMs is how long what this node owns outlives its absence
	// (its Detection.OwnerGrace): the leader applies it (ownerGone).
	OwnerGraceMs int64 `msgpack:"og,omitempty"`
}

// GroupRecord is a placement group: its bundles and the node of each.
type GroupRecord struct {
	ID       string   `msgpack:"id"`
	Strategy Strategy `msgpack:"st"`
	Bundles  []Bundle `msgpack:"b"`
	Nodes    []string `msgpack:"n"`
	Removed  bool     `msgpack:"rm,omitempty"`
	// Pending, set while the group waits for room (GroupOptions.Wait),
	// says what it waits for; it has no Nodes then. A build that does not
	// know it reads a group of no nodes, which it shows and may remove.
	Pending string `msgpack:"pd,omitempty"`
	// Owner is the node that created the group: the group is removed
	// when that node is gone (reapOrphans).
	Owner   string `msgpack:"ow,omitempty"`
	Version uint64 `msgpack:"v"`
	Writer  string `msgpack:"w"`
	// UpdatedMs is when it was removed: the removed record is kept as long
	// as a DEAD actor's (deadRecordTTL), so that a node that missed the
	// removal cannot bring the group back by push/pull.
	UpdatedMs int64 `msgpack:"u,omitempty"`
}

// update is the unit of gossip: any mix of records.
type update struct {
	// Wire is the sender's wire protocol (wire.go): set by encodeUpdate,
	// checked by decodeUpdate.
	Wire   int           `msgpack:"wv,omitempty"`
	Actors []ActorRecord `msgpack:"a,omitempty"`
	Nodes  []NodeRecord  `msgpack:"n,omitempty"`
	Groups []GroupRecord `msgpack:"g,omitempty"`
}

func (u *update) empty() bool { return len(u.Actors)+len(u.Nodes)+len(u.Groups) == 0 }

func newer(v1 uint64, w1 string, v2 uint64, w2 string) bool {
	return v1 > v2 || (v1 == v2 && w1 > w2)
}

// Directory holds the records; it is safe for concurrent use.
type Directory struct {
	mu     sync.RWMutex
	actors map[string]ActorRecord
	nodes  map[string]NodeRecord
	groups map[string]GroupRecord
	// onActor is told of every actor record that changed, old then new
	// (old.Version == 0 when new); called without the lock held.
	onActor func(old, cur ActorRecord)
	// onGroup is told of every group record that changed, likewise.
	onGroup func(old, cur GroupRecord)
	// nodesChanged is closed and replaced whenever a node record changes
	// (NodeChanges).
	nodesChanged chan struct{}
}

func newDirectory() *Directory {
	return &Directory{actors: map[string]ActorRecord{}, nodes: map[string]NodeRecord{}, groups: map[string]GroupRecord{},
		nodesChanged: make(chan struct{})}
}

// nodeChanges is closed at the next change of a node record (its free
// resources, say).
func (d *Directory) nodeChanges() <-chan struct{} {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return d.nodesChanged
}

// merge applies u and returns the records that changed.
func (d *Directory) merge(u *update) *update {
	changed := &update{}
	type pair struct{ old, cur ActorRecord }
	var actorChanges []pair
	d.mu.Lock()
	for _, r := range u.Actors {
		old, ok := d.actors[r.Name]
		if ok && !newer(r.Version, r.Writer, old.Version, old.Writer) {
			continue
		}
		d.actors[r.Name] = r
		changed.Actors = append(changed.Actors, r)
		actorChanges = append(actorChanges, pair{old, r})
	}
	for _, r := range u.Nodes {
		if old, ok := d.nodes[r.ID]; ok && r.Version <= old.Version {
			continue
		}
		d.nodes[r.ID] = r
		changed.Nodes = append(changed.Nodes, r)
	}
	if len(changed.Nodes) > 0 {
		close(d.nodesChanged)
		d.nodesChanged = make(chan struct{})
	}
	type groupPair struct{ old, cur GroupRecord }
	var groupChanges []groupPair
	for _, r := range u.Groups {
		old, ok := d.groups[r.ID]
		if ok && !newer(r.Version, r.Writer, old.Version, old.Writer) {
			continue
		}
		d.groups[r.ID] = r
		changed.Groups = append(changed.Groups, r)
		groupChanges = append(groupChanges, groupPair{old, r})
	}
	cb, gcb := d.onActor, d.onGroup
	d.mu.Unlock()
	if cb != nil {
		for _, p := range actorChanges {
			cb(p.old, p.cur)
		}
	}
	if gcb != nil {
		for _, p := range groupChanges {
			gcb(p.old, p.cur)
		}
	}
	return changed
}

// snapshot is the full state, for push/pull.
func (d *Directory) snapshot() *update {
	d.mu.RLock()
	defer d.mu.RUnlock()
	u := &update{}
	for _, r := range d.actors {
		u.Actors = append(u.Actors, r)
	}
	for _, r := range d.nodes {
		u.Nodes = append(u.Nodes, r)
	}
	for _, r := range d.groups {
		u.Groups = append(u.Groups, r)
	}
	return u
}

// Actor returns the record of the named actor.
func (d *Directory) Actor(name string) (ActorRecord, bool) { return get(d, d.actors, name) }

// Actors returns every actor record, sorted by name.
func (d *Directory) Actors() []ActorRecord { return sortedValues(d, d.actors) }

// Node returns the record of a node.
func (d *Directory) Node(id string) (NodeRecord, bool) { return get(d, d.nodes, id) }

// leavingAt says whether the node whose actor address is addr said it
// is leaving in order (its record is Leaving).
func (d *Directory) leavingAt(addr string) bool {
	d.mu.RLock()
	defer d.mu.RUnlock()
	for _, r := range d.nodes {
		if r.Actor == addr && r.Leaving {
			return true
		}
	}
	return false
}

// Group returns a placement group's record.
func (d *Directory) Group(id string) (GroupRecord, bool) { return get(d, d.groups, id) }

// Groups returns every placement group record, sorted by id.
func (d *Directory) Groups() []GroupRecord { return sortedValues(d, d.groups) }

func get[R any](d *Directory, m map[string]R, key string) (R, bool) {
	d.mu.RLock()
	defer d.mu.RUnlock()
	r, ok := m[key]
	return r, ok
}

// sortedValues copies m's records out in key order.
func sortedValues[R any](d *Directory, m map[string]R) []R {
	d.mu.RLock()
	defer d.mu.RUnlock()
	out := make([]R, 0, len(m))
	for _, k := range sortedKeys(m) {
		out = append(out, m[k])
	}
	return out
}

func encodeUpdate(u *update) ([]byte, error) {
	c := *u
	c.Wire = spoken
	return msgpack.Marshal(&c)
}

// decodeUpdate decodes an update of this node's wire protocol; one of
// another (an older build's, or a newer one's) is refused with an
// errOtherWire.
func decodeUpdate(b []byte) (*update, error) {
	var u update
	if err := unmarshalChecked(b, &u); err != nil {
		return nil, err
	}
	if u.Wire != spoken {
		return nil, errOtherWire{u.Wire}
	}
	return &u, nil
}

// errOtherWire is a directory update of another wire protocol.
type errOtherWire struct{ wire int }

func (e errOtherWire) Error() string {
	return fmt.Sprintf("directory update of wire protocol %d, this node speaks %d: every node of a cluster must run builds of one wire protocol", e.wire, spoken)
}

// deadRecordTTL is how long the directory keeps DEAD actors, removed
// placement groups and departed nodes, so status can show recent deaths
// without the directory growing for ever.
const deadRecordTTL = 10 * time.Minute

// collect drops DEAD actor records last updated before cutoff (or, for a
// record with a longer KeepDeadMs, that long before cutoff's now), groups
// removed before cutoff, and records of nodes not alive that started
// before cutoff. Every node collects on its own clock; a record that
// push/pull brings back is dropped again on the next pass. Removed groups
// wait like dead actors: dropped at once, the older record of a node
// that missed the removal would come back by push/pull as a live group,
// and stay.
func (d *Directory) collect(cutoff time.Time, alive func(id string) bool) {
	ms := cutoff.UnixMilli()
	d.mu.Lock()
	defer d.mu.Unlock()
	ttl := deadRecordTTL.Milliseconds()
	for name, r := range d.actors {
		if r.State == Dead && r.UpdatedMs < ms-max(r.KeepDeadMs-ttl, 0) {
			delete(d.actors, name)
		}
	}
	for id, g := range d.groups {
		if g.Removed && g.UpdatedMs < ms {
			delete(d.groups, id)
		}
	}
	for id, r := range d.nodes {
		if !alive(id) && r.StartedMs < ms {
			delete(d.nodes, id)
		}
	}
}
