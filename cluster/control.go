package cluster

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/rlnode/rlnode/internal/connlimit"
	"github.com/rlnode/rlnode/internal/ctlsign"
	"github.com/rlnode/rlnode/internal/httphost"
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
	Host    string            `json:"host,omitempty"`
	Total   Resources         `json:"total"`
	Used    Resources         `json:"used"`
	Free    Resources         `json:"free"`
	State   string            `json:"state"`
	UptimeS float64           `json:"uptime_s"`
	// ClockOffsetS is how far the node's wall clock is ahead of the
	// queried node's (negative: behind), as last measured on gossip
	// probes; absent for the queried node and before a measure.
	ClockOffsetS float64 `json:"clock_offset_s,omitempty"`
	// Build is the node's rlnode build ("VERSION (REVISION)").
	Build string `json:"build,omitempty"`
	// Tasks is how many tasks run on the node.
	Tasks int `json:"tasks"`
	// Objects and ObjectBytes are the objects the node holds (Put) and
	// their bytes in memory; ObjectSpilledBytes those it wrote to disk.
	Objects            int   `json:"objects"`
	ObjectBytes        int64 `json:"object_bytes"`
	ObjectSpilledBytes int64 `json:"object_spilled_bytes"`
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
	Note     string     `json:"note,omitempty"` // an ALIVE actor's (Node.SetNote)
}

// GroupStatus describes one placement group.
type GroupStatus struct {
	ID       string   `json:"id"`
	Strategy Strategy `json:"strategy"`
	Bundles  []Bundle `json:"bundles"`
	Nodes    []string `json:"nodes"`
	// State is CREATED once every bundle is reserved, PENDING while the
	// group waits for room (GroupOptions.Wait), as Ray names them.
	State string `json:"state"`
	// Pending says what a PENDING group waits for and what holds it.
	Pending string `json:"pending,omitempty"`
}

// Status reports the live nodes and every actor the directory knows.
func (n *Node) Status() Status {
	st := Status{Node: n.id, Nodes: []NodeStatus{}, Actors: []ActorStatus{}, Groups: []GroupStatus{}}
	now := n.now()
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
		// The node's start time is on its own clock.
		offset, _ := n.ClockOffset(id)
		st.Nodes = append(st.Nodes, NodeStatus{
			ID: id, Gossip: rec.Gossip, Actor: rec.Actor, CPUs: rec.Total[CPU], GPUs: gpus, Labels: labels, Host: rec.Host,
			Total: rec.Total, Used: rec.Used, Free: rec.Total.Sub(rec.Used), State: state,
			UptimeS:            now.Add(offset).Sub(time.UnixMilli(rec.StartedMs)).Round(time.Second).Seconds(),
			ClockOffsetS:       offset.Round(time.Millisecond).Seconds(),
			Build:              rec.Build,
			Tasks:              rec.Tasks,
			Objects:            rec.Objects,
			ObjectBytes:        rec.ObjectBytes,
			ObjectSpilledBytes: rec.ObjectSpilledBytes,
		})
	}
	for _, r := range n.dir.Actors() {
		if r.Forgotten {
			continue
		}
		st.Actors = append(st.Actors, ActorStatus{Name: r.Name, Kind: r.Kind, Node: r.Node, State: r.State,
			Restarts: r.Restarts, Cause: r.Cause, Group: r.Group, Note: r.Note})
	}
	for _, g := range n.dir.Groups() {
		if !g.Removed {
			gs := GroupStatus{ID: g.ID, Strategy: g.Strategy, Bundles: g.Bundles, Nodes: g.Nodes, State: "CREATED", Pending: g.Pending}
			if g.Pending != "" {
				gs.State, gs.Nodes = "PENDING", []string{}
			}
			st.Groups = append(st.Groups, gs)
		}
	}
	return st
}

// RunInfo is written to RLNODE_HOME/run/<node id>.json while a node runs,
// so `rlnode status` and `rlnode stop` on the same host find its control
// endpoint from its gossip address. Beside it, <node id>.token (mode 0600)
// holds the token that state-changing control requests must carry;
// FindRunning reads it into Token.
type RunInfo struct {
	NodeID  string `json:"node_id"`
	Gossip  string `json:"gossip_address"`
	Actor   string `json:"actor_address"`
	Control string `json:"control_address"`
	PID     int    `json:"pid"`
	// ProcessStart is the node process's start time (/proc/PID/stat), so
	// a pid reused by another process after the node died is told apart.
	ProcessStart string `json:"process_start,omitempty"`
	Token        string `json:"-"`
	// File is the run file's path; Gone, set by RunFiles, says why its
	// node no longer runs ("" while it runs).
	File string `json:"-"`
	Gone string `json:"-"`
}

// LookedIn says where a command looked for this host's nodes (dir, the
// run folder of Home) and how to find a node that recorded itself in
// another: nodes started with several RLNODE_HOMEs on one host (a
// cluster tried on one machine) were reported as not running at all.
func LookedIn(dir string) string {
	return fmt.Sprintf("looked in %s, where nodes started with this RLNODE_HOME record themselves; for one started with another, set RLNODE_HOME to that", dir)
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
// /metrics for Prometheus, POST /stop) on addr — loopback unless told
// otherwise, with a warning when not — and records it in the run
// directory. POST /stop needs the bearer token of the run directory's
// token file; a request from a browser page of another origin is refused
// (controlGuard). It returns the bound address and a function that
// closes it.
func (n *Node) ServeControl(addr string) (string, func(), error) {
	token, err := newControlToken()
	if err != nil {
		return "", nil, fmt.Errorf("control endpoint: %w", err)
	}
	runDir := filepath.Join(Home(), "run")
	runFile := filepath.Join(runDir, sanitize(n.id)+".json")
	tokenFile := filepath.Join(runDir, sanitize(n.id)+".token")
	// The token file is written before the endpoint exists: without it
	// nothing can be stopped through the endpoint, not even by the CLI.
	// The folders made for it here are removed again on close when empty
	// (a job's node-local RLNODE_HOME, rlnode sbatch, stayed on every
	// joining node otherwise); the files of other nodes keep them.
	made := missingDirs(runDir)
	if err := os.MkdirAll(runDir, 0o700); err != nil {
		return "", nil, fmt.Errorf("control endpoint: %w", err)
	}
	write := func(path string, b []byte) error {
		err := writePrivate(path, b)
		if errors.Is(err, fs.ErrNotExist) {
			// Another node on this home, stopping just now, removed the
			// run folder while it was empty.
			if err = os.MkdirAll(runDir, 0o700); err == nil {
				err = writePrivate(path, b)
			}
		}
		return err
	}
	// Another live node under this id would lose its run file, and with
	// it the way status and stop find it.
	if b, err := os.ReadFile(runFile); err == nil {
		var other RunInfo
		if json.Unmarshal(b, &other) == nil && other.PID != os.Getpid() && processGone(other.PID, other.ProcessStart) == "" {
			return "", nil, fmt.Errorf("control endpoint: node id %s already runs on this host (pid %d, gossip %s, run file %s): choose another node id, or stop it first (if pid %d is not an rlnode node, remove the run file)",
				n.id, other.PID, other.Gossip, runFile, other.PID)
		}
	}
	if err := write(tokenFile, []byte(token+"\n")); err != nil {
		return "", nil, fmt.Errorf("control endpoint: token file: %w", err)
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		_ = os.Remove(tokenFile)
		// net.Listen's error names the address, unless it could not parse it.
		if op := (*net.OpError)(nil); errors.As(err, &op) && op.Addr != nil {
			return "", nil, fmt.Errorf("control endpoint: %w", err)
		}
		return "", nil, fmt.Errorf("control endpoint: listen on %s: %w", addr, err)
	}
	bound := lis.Addr().String()
	loopback := false
	if ap, err := netip.ParseAddrPort(bound); err == nil {
		loopback = ap.Addr().IsLoopback()
	}
	if !loopback {
		n.log.Warn("control endpoint listens beyond loopback: anyone who can reach it reads the cluster's status and metrics (stop needs the token)", "address", bound)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(n.Status())
	})
	mux.Handle("GET /metrics", n.metricsHandler())
	mux.HandleFunc("POST /stop", func(w http.ResponseWriter, r *http.Request) {
		if signedRequest(r) {
			http.Error(w, "control endpoint: refused: a node is stopped from its own host (rlnode stop), with its token", http.StatusForbidden)
			return
		}
		w.WriteHeader(http.StatusAccepted)
		_, _ = fmt.Fprintf(w, "node %s stopping\n", n.id)
		go n.Stop()
	})
	streamed := map[string]int64{}
	n.ctlMu.Lock()
	for _, rt := range n.ctlRoutes {
		mux.Handle(rt.pattern, needToken(token, rt.h))
		if rt.stream > 0 {
			streamed[rt.pattern] = rt.stream
		}
	}
	n.ctlMu.Unlock()
	// One address may hold a few connections open, never the node's
	// descriptors; idle and slow clients are cut off.
	verifier := ctlsign.NewVerifier(n.cfg.Key, nil)
	srv := &http.Server{Handler: controlGuard(token, verifier, !loopback, mux, streamed), ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout: 10 * time.Second, WriteTimeout: 30 * time.Second, IdleTimeout: 30 * time.Second,
		MaxHeaderBytes: MaxControlHeaderBytes}
	capped := connlimit.Limit(lis, orDefault(n.cfg.ConnsPerAddr.Control, DefaultControlConnsPerAddr))
	capped.LogRefused(n.log, "control endpoint: refusing a connection")
	go func() { _ = srv.Serve(capped) }()
	info := RunInfo{NodeID: n.id, Gossip: n.GossipAddress(), Actor: n.ActorAddress(), Control: bound, PID: os.Getpid(), ProcessStart: ownProcessStart()}
	b, _ := json.MarshalIndent(info, "", "  ")
	if err := write(runFile, b); err != nil {
		n.log.Warn("write run file", "file", runFile, "err", err)
	}
	closeFn := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		_ = os.Remove(runFile)
		_ = os.Remove(tokenFile)
		for _, d := range made {
			if os.Remove(d) != nil {
				break // not empty (or gone): nor are the folders above it ours to remove
			}
		}
	}
	return bound, closeFn, nil
}

// HandleControl adds a route to the control endpoints that ServeControl
// serves from now on (net/http's ServeMux pattern: "GET /jobs/{name}").
// Whatever its method, a request needs the node's token, or to be signed
// with the cluster key (internal/ctlsign: how a host without a node
// reaches the routes): these routes act for the node's user (rlnode
// submit's jobs run commands as it).
func (n *Node) HandleControl(pattern string, h http.Handler) {
	n.ctlMu.Lock()
	defer n.ctlMu.Unlock()
	n.ctlRoutes = append(n.ctlRoutes, controlRoute{pattern: pattern, h: h})
}

// HandleControlStream is HandleControl for a route whose body (of at most
// maxBody bytes) is too large to hold in memory, an upload: a signed
// request's body is not read before the handler runs; the handler reads
// it as it comes, and the read that reaches its end fails unless the
// bytes are the ones signed (ctlsign.Verifier.VerifyStream). The handler
// must act on the body only once it has read it whole without error, and
// bounds a request with the token itself.
func (n *Node) HandleControlStream(pattern string, maxBody int64, h http.Handler) {
	n.ctlMu.Lock()
	defer n.ctlMu.Unlock()
	n.ctlRoutes = append(n.ctlRoutes, controlRoute{pattern: pattern, h: h, stream: max(maxBody, 1)})
}

type controlRoute struct {
	pattern string
	h       http.Handler
	stream  int64 // > 0: the body bound of a streamed route (HandleControlStream)
}

// needToken refuses a request without the bearer token, GET included,
// unless controlGuard found it signed with the cluster key.
func needToken(token string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if signedRequest(r) || refuseWithoutToken(w, r, token) {
			next.ServeHTTP(w, r)
		}
	})
}

// MaxControlHeaderBytes bounds a request's headers on the control
// endpoint (net/http's default is 1 MiB, per connection).
const MaxControlHeaderBytes = 64 << 10

// MaxSignedBody bounds the body of a request signed with the cluster key,
// which the control endpoint reads whole to check the signature.
const MaxSignedBody = 2 << 20

type signedKey struct{}

// signedRequest says whether controlGuard checked r's signature.
func signedRequest(r *http.Request) bool {
	_, _, ok := SignedRequest(r)
	return ok
}

// SignedRequest says whether r, on a control route, came signed with the
// cluster key (and not with the node's token), with the time and nonce
// it was signed with. A copy of it sent to another node of the cluster
// is taken there once too (each node remembers its own nonces): a route
// that creates something names it from these, so the copy names the
// same thing and is refused.
func SignedRequest(r *http.Request) (at time.Time, nonce string, ok bool) {
	if v, _ := r.Context().Value(signedKey{}).(bool); !v {
		return time.Time{}, "", false
	}
	return ctlsign.Signed(r)
}

// refuseWithoutToken answers 401 to a request without the bearer token
// and says whether it had it.
func refuseWithoutToken(w http.ResponseWriter, r *http.Request, token string) bool {
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || subtle.ConstantTimeCompare([]byte(got), []byte(token)) != 1 {
		http.Error(w, "control endpoint: refused: "+r.Method+" "+r.URL.Path+" needs the node's token (the .token file beside its run file), or a request signed with the cluster key (--address http://HOST:PORT --key-file KEY on rlnode submit and rlnode job)", http.StatusUnauthorized)
		return false
	}
	return true
}

// missingDirs lists dir and those of its parents that do not exist yet,
// deepest first: what os.MkdirAll(dir) would create.
func missingDirs(dir string) []string {
	var out []string
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		if _, err := os.Lstat(d); !errors.Is(err, fs.ErrNotExist) {
			return out
		}
		out = append(out, d)
		if filepath.Dir(d) == d {
			return out
		}
	}
}

// controlGuard wraps the control endpoint's handler: it refuses (403) a
// request whose Origin is not the endpoint itself (a page of any other
// site) or, unless namesOK (an endpoint bound beyond loopback, reached by
// host name), whose Host is a name other than localhost (a page that
// rebinds its own name to 127.0.0.1); a request that claims a cluster-key
// signature that does not hold (401, saying why); and a state-changing
// request (any method but GET and HEAD) neither signed nor with
// "Authorization: Bearer <token>" (401).
//
// A signed request to a streamed route (its pattern in streamed, with its
// body bound) has its signature checked here and its body as the handler
// reads it.
func controlGuard(token string, verifier *ctlsign.Verifier, namesOK bool, next *http.ServeMux, streamed map[string]int64) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !namesOK && !httphost.ByAddress(r.Host) {
			http.Error(w, "control endpoint: refused: Host must be an IP address or localhost", http.StatusForbidden)
			return
		}
		if o := r.Header.Get("Origin"); o != "" && o != "http://"+r.Host {
			http.Error(w, "control endpoint: refused: cross-origin request from "+o, http.StatusForbidden)
			return
		}
		if ctlsign.IsSigned(r) {
			verify := func() error { return verifier.Verify(r, MaxSignedBody) }
			if _, pattern := next.Handler(r); streamed[pattern] > 0 {
				verify = func() error { return verifier.VerifyStream(r, streamed[pattern]) }
			}
			if err := verify(); err != nil {
				http.Error(w, "control endpoint: "+err.Error(), http.StatusUnauthorized)
				return
			}
			next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), signedKey{}, true)))
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead && !refuseWithoutToken(w, r, token) {
			return
		}
		next.ServeHTTP(w, r)
	})
}

func newControlToken() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

// writePrivate writes b to path readable by this user only (a file
// already there with other modes is replaced, not reused).
func writePrivate(path string, b []byte) error {
	tmp := path + ".tmp"
	_ = os.Remove(tmp)
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		os.Remove(tmp)
		return err
	}
	if err := f.Close(); err != nil {
		os.Remove(tmp)
		return err
	}
	return os.Rename(tmp, path)
}

func sanitize(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '/' || r == '\\' || r == os.PathSeparator {
			return '_'
		}
		return r
	}, s)
}

// ErrNodeGone: a run file names a node whose process is gone (killed
// with SIGKILL, or crashed, before it could remove the file).
var ErrNodeGone = errors.New("node is gone")

// GoneError is FindRunning's error for a node whose run file is stale.
type GoneError struct{ Info RunInfo }

func (e *GoneError) Error() string {
	return fmt.Sprintf("node %s (gossip %s) is gone: %s; it ended without stopping (killed with SIGKILL, or crashed) and left its run file %s",
		e.Info.NodeID, e.Info.Gossip, e.Info.Gone, e.Info.File)
}

func (e *GoneError) Unwrap() error { return ErrNodeGone }

// FindRunning returns the run info of the local node with gossip address,
// control address or node id addr, or of the only local node when addr is
// empty. A node named by addr that is gone is a *GoneError.
func FindRunning(addr string) (RunInfo, error) {
	dir, all, err := RunFiles()
	if err != nil {
		return RunInfo{}, err
	}
	var infos, gone []RunInfo
	for _, ri := range all {
		if ri.Gone == "" {
			infos = append(infos, ri)
		} else {
			gone = append(gone, ri)
		}
	}
	if addr == "" {
		switch len(infos) {
		case 0:
			if len(gone) == 1 {
				return RunInfo{}, &GoneError{Info: gone[0]}
			}
			return RunInfo{}, fmt.Errorf("no rlnode node runs on this host (%s); start one with `rlnode start`", LookedIn(dir))
		case 1:
			return infos[0], nil
		}
		return RunInfo{}, &SeveralNodesError{Nodes: infos}
	}
	for _, ri := range infos {
		if ri.Gossip == addr || ri.Control == addr || ri.NodeID == addr {
			return ri, nil
		}
	}
	for _, ri := range gone {
		if ri.Gossip == addr || ri.Control == addr || ri.NodeID == addr {
			return RunInfo{}, &GoneError{Info: ri}
		}
	}
	return RunInfo{}, fmt.Errorf("no node with gossip address, control address or id %s found on this host (%s); a node on another host is reached at its control endpoint, --address http://HOST:PORT (rlnode status, submit and job; rlnode start|join --status-bind)", addr, LookedIn(dir))
}

// NoAnswer is err, a request's failure since start, with a word for a
// user where the node did not answer in time: a node whose process is
// stopped (SIGSTOP, a debugger) or starved gave only Go's "context
// deadline exceeded".
func NoAnswer(err error, start time.Time) error {
	if !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return fmt.Errorf("no answer within %v (the node's process may be stopped, stuck or starved of CPU): %w", time.Since(start).Round(time.Second), err)
}

// SeveralNodesError is FindRunning's answer to no address when several
// nodes run on this host: Nodes are they.
type SeveralNodesError struct{ Nodes []RunInfo }

func (e *SeveralNodesError) Error() string {
	var list []string
	for _, ri := range e.Nodes {
		list = append(list, ri.Gossip)
	}
	return fmt.Sprintf("%d nodes run on this host (%s): choose one with --address", len(e.Nodes), strings.Join(list, ", "))
}

// FetchStatus asks a node's control endpoint for its Status.
func FetchStatus(ctx context.Context, control string) (Status, error) {
	var st Status
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+control+"/status", nil)
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return st, fmt.Errorf("status from %s: %w", control, NoAnswer(err, start))
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

// RequestStop asks a node's control endpoint to leave the cluster, with
// the token of its run directory (RunInfo.Token).
func RequestStop(ctx context.Context, control, token string) error {
	if token == "" {
		return fmt.Errorf("stop %s: no control token (the node's .token file in %s is missing or unreadable)", control, filepath.Join(Home(), "run"))
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+control+"/stop", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("stop %s: %w", control, err)
	}
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		return fmt.Errorf("stop %s: HTTP %d: %s", control, resp.StatusCode, strings.TrimSpace(string(msg)))
	}
	return nil
}

// ErrKeyFileMode is the error LoadOrCreateKey returns for a key file that
// users other than its owner may read or write.
var ErrKeyFileMode = errors.New("other users may read or write it")

// maxKeyFileBytes bounds what LoadOrCreateKey reads: a key is 44 base64
// characters at most, and a path such as /dev/zero must not be read on.
const maxKeyFileBytes = 4096

// LoadOrCreateKey reads the base64 gossip key in path, creating a fresh
// 32-byte key (mode 0600) when create is set and the file is absent. As
// ssh does with private keys, it refuses a key file that its group or
// other users may read or write (ErrKeyFileMode): whoever reads the key
// is a member of the cluster.
func LoadOrCreateKey(path string, create bool) ([]byte, bool, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) && create {
		key, cerr := createKey(path)
		if !errors.Is(cerr, fs.ErrExist) {
			return key, cerr == nil, cerr
		}
		// Another process created it first: use that key. (This open
		// assigned a shadowed err once, so the caller got the first
		// open's "no such file".)
		f, err = os.Open(path)
	}
	if err != nil {
		return nil, false, fmt.Errorf("key file %s: %w", path, pathReason(err))
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, false, fmt.Errorf("key file %s: %w", path, err)
	}
	if !fi.Mode().IsRegular() {
		return nil, false, fmt.Errorf("key file %s: not a regular file", path)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return nil, false, fmt.Errorf("key file %s: mode %04o: %w; restrict it with chmod 600 %s", path, perm, ErrKeyFileMode, path)
	}
	b, err := io.ReadAll(io.LimitReader(f, maxKeyFileBytes+1))
	if err != nil {
		return nil, false, fmt.Errorf("key file %s: %w", path, err)
	}
	if len(b) > maxKeyFileBytes {
		return nil, false, fmt.Errorf("key file %s: more than %d bytes; a key is 16, 24 or 32 bytes in base64", path, maxKeyFileBytes)
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

// pathReason is an *fs.PathError's reason without the path, which the
// caller names already.
func pathReason(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// createKey writes a fresh 32-byte key to path, which must not exist
// (fs.ErrExist when it does), readable by its owner only.
func createKey(path string) ([]byte, error) {
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("key file %s: %w", path, err)
	}
	// Written whole to a file of its own, then linked to path: a process
	// that opens path meanwhile (another node starting on this home)
	// finds no file, or the whole key, never an empty one.
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return nil, fmt.Errorf("key file %s: %w", path, pathReason(err))
	}
	defer os.Remove(tmp.Name())
	_, err = tmp.WriteString(base64.StdEncoding.EncodeToString(key) + "\n")
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("key file %s: %w", path, err)
	}
	if err := os.Link(tmp.Name(), path); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return nil, fs.ErrExist
		}
		return nil, fmt.Errorf("key file %s: %w", path, pathReason(err))
	}
	return key, nil
}
