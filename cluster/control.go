package cluster

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// Status is the cluster as one node sees it; `rlnode status --json` prints
// it as is.
type Status struct {
	Node   string        `json:"queried_node"`
	Nodes  []NodeStatus  `json:"nodes"`
	Actors []ActorStatus `json:"actors"`
	Groups []GroupStatus `json:"placement_groups"`
}

// NodeStatus describes one live node.
type NodeStatus struct {
	ID      string            `json:"id"`
	Gossip  string            `json:"gossip_address"`
	Actor   string            `json:"actor_address"`
	CPUs    float64           `json:"cpus"`
	GPUs    []GPUInfo         `json:"gpus"`
	Labels  map[string]string `json:"labels"`
	Total   Resources         `json:"total"`
	Used    Resources         `json:"used"`
	Free    Resources         `json:"free"`
	State   string            `json:"state"`
	UptimeS float64           `json:"uptime_s"`
}

// ActorStatus describes one actor.
type ActorStatus struct {
	Name     string     `json:"name"`
	Kind     string     `json:"kind"`
	Node     string     `json:"node"`
	State    ActorState `json:"state"`
	Restarts int        `json:"restarts"`
	Cause    string     `json:"death_cause,omitempty"`
	Group    string     `json:"placement_group,omitempty"`
}

// GroupStatus describes one placement group.
type GroupStatus struct {
	ID       string   `json:"id"`
	Strategy Strategy `json:"strategy"`
	Bundles  []Bundle `json:"bundles"`
	Nodes    []string `json:"nodes"`
}

// Status reports the live nodes and every actor the directory knows.
func (n *Node) Status() Status {
	st := Status{Node: n.id, Nodes: []NodeStatus{}, Actors: []ActorStatus{}, Groups: []GroupStatus{}}
	now := time.Now()
	for _, id := range n.aliveIDs() {
		rec, ok := n.dir.Node(id)
		if !ok {
			st.Nodes = append(st.Nodes, NodeStatus{ID: id, State: "JOINING"})
			continue
		}
		state := "ALIVE"
		if rec.Leaving {
			state = "LEAVING"
		}
		gpus := rec.GPUs
		if gpus == nil {
			gpus = []GPUInfo{}
		}
		labels := rec.Labels
		if labels == nil {
			labels = map[string]string{}
		}
		st.Nodes = append(st.Nodes, NodeStatus{
			ID: id, Gossip: rec.Gossip, Actor: rec.Actor, CPUs: rec.Total[CPU], GPUs: gpus, Labels: labels,
			Total: rec.Total, Used: rec.Used, Free: rec.Total.Sub(rec.Used), State: state,
			UptimeS: now.Sub(time.UnixMilli(rec.StartedMs)).Round(time.Second).Seconds(),
		})
	}
	for _, r := range n.dir.Actors() {
		st.Actors = append(st.Actors, ActorStatus{Name: r.Name, Kind: r.Kind, Node: r.Node, State: r.State,
			Restarts: r.Restarts, Cause: r.Cause, Group: r.Group})
	}
	for _, g := range n.dir.Groups() {
		if !g.Removed {
			st.Groups = append(st.Groups, GroupStatus{ID: g.ID, Strategy: g.Strategy, Bundles: g.Bundles, Nodes: g.Nodes})
		}
	}
	return st
}

// RunInfo is written to RLNODE_HOME/run/<node id>.json while a node runs,
// so `rlnode status` and `rlnode stop` on the same host find its control
// endpoint from its gossip address.
type RunInfo struct {
	NodeID  string `json:"node_id"`
	Gossip  string `json:"gossip_address"`
	Actor   string `json:"actor_address"`
	Control string `json:"control_address"`
	PID     int    `json:"pid"`
}

// Home is rlnode's state directory: $RLNODE_HOME, or ~/.rlnode.
func Home() string {
	if h := os.Getenv("RLNODE_HOME"); h != "" {
		return h
	}
	if h, err := os.UserHomeDir(); err == nil {
		return filepath.Join(h, ".rlnode")
	}
	return ".rlnode"
}

// ServeControl serves the node's control endpoint (GET /status, GET
// /metrics for Prometheus, POST /stop) on addr — loopback unless told otherwise — and records it in the run
// directory. It returns the bound address and a function that closes it.
func (n *Node) ServeControl(addr string) (string, func(), error) {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return "", nil, fmt.Errorf("control endpoint: listen on %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(n.Status())
	})
	mux.Handle("GET /metrics", n.metricsHandler())
	mux.HandleFunc("POST /stop", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusAccepted)
		_, _ = fmt.Fprintf(w, "node %s stopping\n", n.id)
		go n.Stop()
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(lis) }()
	bound := lis.Addr().String()
	runDir := filepath.Join(Home(), "run")
	runFile := filepath.Join(runDir, sanitize(n.id)+".json")
	info := RunInfo{NodeID: n.id, Gossip: n.GossipAddress(), Actor: n.ActorAddress(), Control: bound, PID: os.Getpid()}
	if err := os.MkdirAll(runDir, 0o700); err == nil {
		b, _ := json.MarshalIndent(info, "", "  ")
		if err := os.WriteFile(runFile, b, 0o600); err != nil {
			n.log.Warn("write run file", "file", runFile, "err", err)
		}
	}
	closeFn := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		_ = os.Remove(runFile)
	}
	return bound, closeFn, nil
}

func sanitize(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '/' || r == '\\' || r == os.PathSeparator {
			return '_'
		}
		return r
	}, s)
}

// FindRunning returns the run info of the local node with gossip address
// addr, or of the only local node when addr is empty.
func FindRunning(addr string) (RunInfo, error) {
	dir := filepath.Join(Home(), "run")
	entries, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return RunInfo{}, fmt.Errorf("read %s: %w", dir, err)
	}
	var infos []RunInfo
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".json") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			continue
		}
		var ri RunInfo
		if json.Unmarshal(b, &ri) != nil || !processAlive(ri.PID) {
			continue
		}
		infos = append(infos, ri)
	}
	sort.Slice(infos, func(i, j int) bool { return infos[i].Gossip < infos[j].Gossip })
	if addr == "" {
		switch len(infos) {
		case 0:
			return RunInfo{}, fmt.Errorf("no rlnode node runs on this host (looked in %s); start one with `rlnode start`", dir)
		case 1:
			return infos[0], nil
		}
		var list []string
		for _, ri := range infos {
			list = append(list, ri.Gossip)
		}
		return RunInfo{}, fmt.Errorf("%d nodes run on this host (%s): choose one with --address", len(infos), strings.Join(list, ", "))
	}
	for _, ri := range infos {
		if ri.Gossip == addr || ri.Control == addr || ri.NodeID == addr {
			return ri, nil
		}
	}
	return RunInfo{}, fmt.Errorf("no node with gossip address %s runs on this host (looked in %s); status and stop talk to a node on the same host, whose control endpoint listens on loopback", addr, dir)
}

func processAlive(pid int) bool {
	if pid <= 0 {
		return false
	}
	_, err := os.Stat(fmt.Sprintf("/proc/%d", pid))
	return err == nil
}

// FetchStatus asks a node's control endpoint for its Status.
func FetchStatus(ctx context.Context, control string) (Status, error) {
	var st Status
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+control+"/status", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return st, fmt.Errorf("status from %s: %w", control, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return st, fmt.Errorf("status from %s: HTTP %d", control, resp.StatusCode)
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return st, fmt.Errorf("status from %s: %w", control, err)
	}
	return st, nil
}

// RequestStop asks a node's control endpoint to leave the cluster.
func RequestStop(ctx context.Context, control string) error {
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+control+"/stop", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("stop %s: %w", control, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		return fmt.Errorf("stop %s: HTTP %d", control, resp.StatusCode)
	}
	return nil
}

// LoadOrCreateKey reads the base64 gossip key in path, creating a fresh
// 32-byte key (mode 0600) when create is set and the file is absent.
func LoadOrCreateKey(path string, create bool) ([]byte, bool, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) && create {
		key := make([]byte, 32)
		if _, err := rand.Read(key); err != nil {
			return nil, false, err
		}
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return nil, false, fmt.Errorf("key file %s: %w", path, err)
		}
		if err := os.WriteFile(path, []byte(base64.StdEncoding.EncodeToString(key)+"\n"), 0o600); err != nil {
			return nil, false, fmt.Errorf("key file %s: %w", path, err)
		}
		return key, true, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("key file %s: %w", path, err)
	}
	key, err := base64.StdEncoding.DecodeString(strings.TrimSpace(string(b)))
	if err != nil {
		return nil, false, fmt.Errorf("key file %s: not base64: %w", path, err)
	}
	if l := len(key); l != 16 && l != 24 && l != 32 {
		return nil, false, fmt.Errorf("key file %s: key is %d bytes, want 16, 24 or 32", path, l)
	}
	return key, false, nil
}
