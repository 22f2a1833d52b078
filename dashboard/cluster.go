package dashboard

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/rlnode/rlnode/cluster"
	"github.com/rlnode/rlnode/jobs"
)

// StatusSource answers the cluster's status as one node sees it. Status
// must be safe for concurrent use and return by the time ctx ends.
type StatusSource interface {
	Status(ctx context.Context) (cluster.Status, error)
}

// LocalNode is the status of a node in this process.
type LocalNode struct{ Node *cluster.Node }

// Status returns the node's own view.
func (l LocalNode) Status(context.Context) (cluster.Status, error) { return l.Node.Status(), nil }

// HostNodes asks the control endpoint of a node running on this host
// (cluster.Running): the one with gossip address, control address or id
// Address, or else any that answers, trying them in turn.
type HostNodes struct{ Address string }

// perNodeTimeout bounds the wait for one node's status.
const perNodeTimeout = 2 * time.Second

// Status asks the nodes in turn until one answers.
func (h HostNodes) Status(ctx context.Context) (cluster.Status, error) {
	dir, infos, err := cluster.Running()
	if err != nil {
		return cluster.Status{}, err
	}
	if h.Address != "" {
		ri, err := cluster.FindRunning(h.Address)
		if err != nil {
			return cluster.Status{}, err
		}
		infos = []cluster.RunInfo{ri}
	}
	if len(infos) == 0 {
		return cluster.Status{}, fmt.Errorf("no rlnode node runs on this host (%s); start one with `rlnode start`", cluster.LookedIn(dir))
	}
	var errs []error
	for _, ri := range infos {
		// A node that hangs leaves time to ask the next.
		nctx, cancel := context.WithTimeout(ctx, perNodeTimeout)
		st, err := cluster.FetchStatus(nctx, ri.Control)
		cancel()
		if err == nil {
			return st, nil
		}
		errs = append(errs, fmt.Errorf("node %s: %w", ri.NodeID, err))
	}
	return cluster.Status{}, errors.Join(errs...)
}

// RemoteNode is the status a node on another host answers at its control
// endpoint, HOST:PORT (bound beyond loopback: its status is open to GET).
type RemoteNode struct{ Control string }

// remoteTimeout bounds a remote node's answer.
const remoteTimeout = 5 * time.Second

// Status asks the node.
func (r RemoteNode) Status(ctx context.Context) (cluster.Status, error) {
	ctx, cancel := context.WithTimeout(ctx, remoteTimeout)
	defer cancel()
	st, err := cluster.FetchStatus(ctx, r.Control)
	if err != nil {
		return cluster.Status{}, fmt.Errorf("node at %s: %w", r.Control, err)
	}
	return st, nil
}

// NodeView is a node as the cluster page shows it: its last status, and
// when it was last seen alive.
type NodeView struct {
	cluster.NodeStatus
	LastSeen time.Time `json:"last_seen"`
	// GoneSince is when the node left the membership: state DEAD (it
	// vanished while alive: a crash, a kill, a lost network) or LEFT (it
	// was leaving).
	GoneSince *time.Time `json:"gone_since,omitempty"`
}

// Bounds on the nodes remembered after they are gone.
const (
	goneTTL     = time.Hour
	maxGoneKept = 1000
)

// nodeBook remembers the nodes seen, so a node that vanishes from the
// membership is shown DEAD (or LEFT) rather than silently dropped. It is
// pure: merge takes the time and a status.
type nodeBook struct {
	nodes map[string]NodeView
}

// merge records a status taken at now and returns every node: those in
// the status as they are, those seen before and absent now as DEAD or
// LEFT since the first status without them; gone nodes are forgotten
// after goneTTL (and beyond maxGoneKept, the oldest first). Sorted: live
// nodes by id, then gone ones by id.
func (b *nodeBook) merge(now time.Time, live []cluster.NodeStatus) []NodeView {
	if b.nodes == nil {
		b.nodes = map[string]NodeView{}
	}
	present := map[string]bool{}
	for _, n := range live {
		present[n.ID] = true
		b.nodes[n.ID] = NodeView{NodeStatus: n, LastSeen: now}
	}
	var gone []string
	for id, v := range b.nodes {
		if present[id] {
			continue
		}
		if v.GoneSince == nil {
			t := now
			v.GoneSince = &t
			if v.State == "LEAVING" {
				v.State = "LEFT"
			} else {
				v.State = "DEAD"
			}
			v.UptimeS = 0
			b.nodes[id] = v
		}
		if now.Sub(*v.GoneSince) > goneTTL {
			delete(b.nodes, id)
			continue
		}
		gone = append(gone, id)
	}
	if len(gone) > maxGoneKept {
		sort.Slice(gone, func(i, j int) bool { return b.nodes[gone[i]].GoneSince.Before(*b.nodes[gone[j]].GoneSince) })
		for _, id := range gone[:len(gone)-maxGoneKept] {
			delete(b.nodes, id)
		}
	}
	out := make([]NodeView, 0, len(b.nodes))
	for _, v := range b.nodes {
		out = append(out, v)
	}
	sort.Slice(out, func(i, j int) bool {
		gi, gj := out[i].GoneSince != nil, out[j].GoneSince != nil
		if gi != gj {
			return !gi
		}
		return out[i].ID < out[j].ID
	})
	return out
}

// ClusterView is what the cluster page draws.
type ClusterView struct {
	// Asked is the node whose view this is; Error says why the last
	// attempt to ask failed (the view is then the last one that worked,
	// taken at Taken).
	Asked  string                  `json:"asked,omitempty"`
	Taken  time.Time               `json:"taken,omitzero"`
	Error  string                  `json:"error,omitempty"`
	Nodes  []NodeView              `json:"nodes"`
	Actors []cluster.ActorStatus   `json:"actors"`
	Jobs   []JobView               `json:"jobs"`
	Groups []cluster.GroupStatus   `json:"placement_groups"`
	Totals map[string]ClusterTotal `json:"totals"`
}

// JobView is a job of rlnode submit, from its actor's record.
type JobView struct {
	Name     string `json:"name"`
	Status   string `json:"status"` // RUNNING, PENDING, RESTARTING, SUCCEEDED, FAILED, STOPPED
	Node     string `json:"node"`
	Restarts int    `json:"restarts"`
	Cause    string `json:"cause,omitempty"`
}

// jobViews are the jobs among actors, in their order.
func jobViews(actors []cluster.ActorStatus) []JobView {
	out := []JobView{}
	for _, a := range actors {
		if a.Kind != jobs.Kind {
			continue
		}
		v := JobView{Name: a.Name, Node: a.Node, Restarts: a.Restarts}
		v.Status, v.Cause = jobs.Describe(a.State, a.Cause, a.Note)
		out = append(out, v)
	}
	return out
}

// ClusterTotal sums one resource over the live nodes.
type ClusterTotal struct {
	Total float64 `json:"total"`
	Used  float64 `json:"used"`
}

// clusterWatch polls a StatusSource and keeps the latest view.
type clusterWatch struct {
	src    StatusSource
	period time.Duration

	mu   sync.Mutex
	book nodeBook
	view ClusterView
}

// poll asks the source once and updates the view.
func (w *clusterWatch) poll(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	st, err := w.src.Status(ctx)
	now := time.Now().UTC()
	w.mu.Lock()
	defer w.mu.Unlock()
	if err != nil {
		w.view.Error = strings.TrimSpace(err.Error())
		return
	}
	nodes := w.book.merge(now, st.Nodes)
	totals := map[string]ClusterTotal{}
	for _, n := range st.Nodes {
		for k, v := range n.Total {
			t := totals[k]
			t.Total += v
			t.Used += n.Used[k]
			totals[k] = t
		}
	}
	w.view = ClusterView{Asked: st.Node, Taken: now, Nodes: nodes, Actors: st.Actors, Jobs: jobViews(st.Actors), Groups: st.Groups, Totals: totals}
}

// run polls until ctx ends.
func (w *clusterWatch) run(ctx context.Context) {
	t := time.NewTicker(w.period)
	defer t.Stop()
	for {
		w.poll(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (w *clusterWatch) current() ClusterView {
	w.mu.Lock()
	defer w.mu.Unlock()
	v := w.view
	if v.Nodes == nil {
		v.Nodes = []NodeView{}
	}
	if v.Actors == nil {
		v.Actors = []cluster.ActorStatus{}
	}
	if v.Groups == nil {
		v.Groups = []cluster.GroupStatus{}
	}
	if v.Jobs == nil {
		v.Jobs = []JobView{}
	}
	if v.Totals == nil {
		v.Totals = map[string]ClusterTotal{}
	}
	return v
}
