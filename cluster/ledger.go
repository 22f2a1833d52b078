package cluster

import (
	"fmt"
	"sort"
	"strings"
	"sync"
)

// ledger is a node's account of its resources: what actors use and what
// placement groups reserved. Every spawn and reservation on the node goes
// through it, so a node is never overcommitted whatever its peers believed.
// GPUs are also accounted per device (devices.go): each holder gets
// shares of particular devices.
type ledger struct {
	mu      sync.Mutex
	total   Resources
	used    Resources // actors outside groups + all reserved bundles
	bundles map[bundleKey]*bundleUse
	actors  map[string]actorUse
	gpuIDs  []int     // GPUInfo.Index of each device
	gpuFree []float64 // per device: neither held outside groups nor reserved
}

type bundleKey struct {
	group string
	index int
}

type bundleUse struct {
	reserved, used Resources
	version        uint64 // of the group record that places it here (reserveRequest.Version)
	gpus           []gpuShare
	gpuFree        []float64 // per device: reserved for the bundle, not yet held
}

type actorUse struct {
	res    Resources
	bundle *bundleKey
	gpus   []gpuShare
}

func (l *ledger) init(total Resources, gpus []GPUInfo) {
	l.total = total
	l.used = Resources{}
	l.bundles = map[bundleKey]*bundleUse{}
	l.actors = map[string]actorUse{}
	l.gpuIDs = make([]int, len(gpus))
	l.gpuFree = make([]float64, len(gpus))
	for i, g := range gpus {
		l.gpuIDs[i], l.gpuFree[i] = g.Index, 1
	}
}

// gpusOf is the indices of the devices the holder name (an actor, or
// "task/ID") was given; nil when it holds none.
func (l *ledger) gpusOf(name string) []int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return deviceIDs(l.gpuIDs, l.actors[name].gpus)
}

// noDevice is the error for a GPU amount that the free total covers but
// no choice of devices does.
func (l *ledger) noDevice(amount float64, free []float64) error {
	return fmt.Errorf("GPU %s: no choice of devices has it free (free per device %s): %w",
		fmtAmount(GPU, amount), fmtGPUFree(l.gpuIDs, free), ErrInfeasible)
}

func (l *ledger) snapshot() (total, used Resources) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.total.Clone(), l.used.Clone()
}

// acquire charges an actor's resources to the node, or to its bundle.
func (l *ledger) acquire(name string, res Resources, group string, bundle int) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, dup := l.actors[name]; dup {
		return fmt.Errorf("actor %q already holds resources here", name)
	}
	if group != "" {
		k := bundleKey{group, bundle}
		b := l.bundles[k]
		if b == nil {
			return fmt.Errorf("placement group %s bundle %d is not reserved on this node", group, bundle)
		}
		if !b.reserved.Covers(res) {
			return fmt.Errorf("placement group %s bundle %d reserves %s in all, lacks %s: the actor never fits in it", group, bundle, b.reserved, strings.Join(b.reserved.Missing(res), ", "))
		}
		if free := b.reserved.Sub(b.used); !free.Covers(res) {
			// Only the group's own actors take from its bundles: the room
			// frees when one of them ends. ErrInfeasible marks the reply
			// NoRoom; the spawner makes it ErrNoRoom.
			return fmt.Errorf("placement group %s bundle %d has free %s, lacks %s: the group's own actors hold the bundle (%s): %w",
				group, bundle, free, strings.Join(free.Missing(res), ", "), l.bundleHolders(k), ErrInfeasible)
		}
		devs, ok := assignGPUs(b.gpuFree, res[GPU])
		if !ok {
			return fmt.Errorf("placement group %s bundle %d: %w", group, bundle, l.noDevice(res[GPU], b.gpuFree))
		}
		takeGPUs(b.gpuFree, devs)
		b.used = b.used.Add(res)
		l.actors[name] = actorUse{res: res, bundle: &k, gpus: devs}
		return nil
	}
	if free := l.total.Sub(l.used); !free.Covers(res) {
		return fmt.Errorf("free %s, lacks %s: %w", free, strings.Join(free.Missing(res), ", "), ErrInfeasible)
	}
	devs, ok := assignGPUs(l.gpuFree, res[GPU])
	if !ok {
		return l.noDevice(res[GPU], l.gpuFree)
	}
	takeGPUs(l.gpuFree, devs)
	l.used = l.used.Add(res)
	l.actors[name] = actorUse{res: res, gpus: devs}
	return nil
}

// bundleHolders names the actors that hold part of bundle k, with what
// each holds (l.mu held).
func (l *ledger) bundleHolders(k bundleKey) string {
	var who []string
	for name, a := range l.actors {
		if a.bundle != nil && *a.bundle == k {
			who = append(who, fmt.Sprintf("%s %s", name, a.res))
		}
	}
	if len(who) == 0 {
		return "none now"
	}
	sort.Strings(who)
	if len(who) > 8 {
		who = append(who[:8], fmt.Sprintf("%d more", len(who)-8))
	}
	return strings.Join(who, ", ")
}

// release returns an actor's resources; it reports whether it held any.
func (l *ledger) release(name string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	a, ok := l.actors[name]
	if !ok {
		return false
	}
	delete(l.actors, name)
	if a.bundle != nil {
		if b := l.bundles[*a.bundle]; b != nil {
			b.used = b.used.Sub(a.res)
			giveGPUs(b.gpuFree, a.gpus)
		}
		return true
	}
	l.used = l.used.Sub(a.res)
	giveGPUs(l.gpuFree, a.gpus)
	return true
}

// reserve sets aside bundles of a placement group, all or none.
func (l *ledger) reserve(group string, idx []int, res []Resources, version uint64) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	need := Resources{}
	for i, r := range res {
		if _, dup := l.bundles[bundleKey{group, idx[i]}]; dup {
			return fmt.Errorf("placement group %s bundle %d already reserved here", group, idx[i])
		}
		need = need.Add(r)
	}
	if free := l.total.Sub(l.used); !free.Covers(need) {
		return fmt.Errorf("free %s, lacks %s: %w", free, strings.Join(free.Missing(need), ", "), ErrInfeasible)
	}
	// Devices for each bundle in index order, on a copy: all or none.
	free := append([]float64(nil), l.gpuFree...)
	devs := make([][]gpuShare, len(res))
	for i, r := range res {
		d, ok := assignGPUs(free, r[GPU])
		if !ok {
			return fmt.Errorf("placement group %s bundle %d: %w", group, idx[i], l.noDevice(r[GPU], free))
		}
		takeGPUs(free, d)
		devs[i] = d
	}
	l.gpuFree = free
	for i, r := range res {
		own := make([]float64, len(free))
		giveGPUs(own, devs[i])
		l.bundles[bundleKey{group, idx[i]}] = &bundleUse{reserved: r.Clone(), used: Resources{}, version: version, gpus: devs[i], gpuFree: own}
	}
	l.used = l.used.Add(need)
	return nil
}

// unreserve drops every bundle of group held here; it reports whether
// it held any.
func (l *ledger) unreserve(group string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	held := false
	for k, b := range l.bundles {
		if k.group == group {
			l.used = l.used.Sub(b.reserved)
			giveGPUs(l.gpuFree, b.gpus)
			delete(l.bundles, k)
			held = true
		}
	}
	return held
}

// unplaced drops the bundles of g held here that g, a record at least
// as new as the one that placed each here, places elsewhere, and returns
// their indices. Actors still charged to one give nothing back when they
// stop (release).
func (l *ledger) unplaced(g GroupRecord, here string) []int {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []int
	for k, b := range l.bundles {
		if k.group != g.ID || g.Version < b.version || (k.index < len(g.Nodes) && g.Nodes[k.index] == here) {
			continue
		}
		l.used = l.used.Sub(b.reserved)
		giveGPUs(l.gpuFree, b.gpus)
		delete(l.bundles, k)
		out = append(out, k.index)
	}
	sort.Ints(out)
	return out
}
