package vllm

// vLLM servers that rlnode starts and stops itself: each is an actor of
// kind ServerKind holding its GPUs, which runs `vllm serve` as a child
// process bound to those devices and answers ServerURLRequest with where
// it listens once /health answers. On a node that does not see the run
// folder (LaunchArgs.Folders: the learners' probe file) it serves a copy
// of the model fetched onto its node, and each folder it is told to load
// is fetched there too (StageRequest), over the driver's folder server
// (learner.ServeFolders, learner.Staging).

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rlnode/rlnode/actor"
	"github.com/rlnode/rlnode/cluster"
	"github.com/rlnode/rlnode/learner"
)

// ServerKind is the actor kind of a launched vLLM server.
const ServerKind = "rlnode.vllm-server"

// LaunchLabel is the node label, set to "on", of nodes that launch vLLM
// servers (OfferServers): a launch is placed only there.
const LaunchLabel = "rlnode.vllm"

// Bounds of a launch.
const (
	MaxLaunchArgs        = 64
	MaxLaunchArgLen      = 4096
	DefaultStartTimeout  = 20 * time.Minute
	MaxStartTimeout      = 2 * time.Hour
	serverStopGrace      = 20 * time.Second
	launchLogTail        = 4096
	healthPollEvery      = 500 * time.Millisecond
	maxLaunchedPerNode   = 64
	launchEnvCommandName = "RLNODE_VLLM_COMMAND"
	// keepStaged is how many staged weight folders a server keeps: the one
	// it loads and the one before.
	keepStaged = 2
	// locateTimeout bounds asking a server actor where it serves
	// (Launched.Locate).
	locateTimeout = time.Minute
	// stageAllowance is added to the start timeout to bound a restart on
	// another node, which fetches the model first where that node does
	// not see it.
	stageAllowance = 30 * time.Minute
)

// LaunchFlags are the `vllm serve` options a launch may add (each with
// its value where it takes one). rlnode sets the model, --served-model-name,
// --host, --port and --api-key itself; anything that runs code from the
// model's folder (--trust-remote-code), reads other files or changes
// where the server listens is refused, since a recipe may come from
// anyone who holds the cluster key.
var LaunchFlags = []string{
	"--dtype", "--max-model-len", "--gpu-memory-utilization", "--tensor-parallel-size",
	"--pipeline-parallel-size", "--max-num-seqs", "--max-num-batched-tokens", "--enable-prefix-caching",
	"--no-enable-prefix-caching", "--enforce-eager", "--seed", "--kv-cache-dtype", "--block-size",
	"--swap-space", "--enable-lora", "--max-lora-rank", "--max-loras", "--weight-transfer-config",
	"--enable-chunked-prefill", "--no-enable-chunked-prefill", "--quantization", "--disable-log-requests",
}

// flagsWithoutValue are LaunchFlags that take no value.
var flagsWithoutValue = []string{"--enable-prefix-caching", "--no-enable-prefix-caching", "--enforce-eager",
	"--enable-lora", "--enable-chunked-prefill", "--no-enable-chunked-prefill", "--disable-log-requests"}

// CheckLaunchArgs reports the first argument of args a launch does not
// take: an option outside LaunchFlags, a value where none goes, or a
// size out of bounds. Both the recipe check and the server actor run it.
func CheckLaunchArgs(args []string) error {
	if len(args) > MaxLaunchArgs {
		return fmt.Errorf("%d arguments, over the %d a launch takes", len(args), MaxLaunchArgs)
	}
	for i := 0; i < len(args); i++ {
		a := args[i]
		if len(a) > MaxLaunchArgLen || strings.ContainsRune(a, 0) {
			return fmt.Errorf("argument %d: over %d bytes or holds a NUL", i, MaxLaunchArgLen)
		}
		name, value, hasValue := strings.Cut(a, "=")
		if !slices.Contains(LaunchFlags, name) {
			return fmt.Errorf("argument %d %q: not an option a launch may set (%s); rlnode sets the model, --served-model-name, --host, --port and --api-key",
				i, a, strings.Join(LaunchFlags, " "))
		}
		if slices.Contains(flagsWithoutValue, name) {
			if hasValue {
				return fmt.Errorf("argument %d %q: %s takes no value", i, a, name)
			}
			continue
		}
		if !hasValue {
			if i+1 >= len(args) || strings.HasPrefix(args[i+1], "--") {
				return fmt.Errorf("argument %d %q: %s needs a value", i, a, name)
			}
			i++
			value = args[i]
		}
		if len(value) > MaxLaunchArgLen {
			return fmt.Errorf("argument %d: %s's value over %d bytes", i, name, MaxLaunchArgLen)
		}
	}
	return nil
}

// LaunchArgs are a server actor's spawn arguments.
type LaunchArgs struct {
	// Model is what `vllm serve` serves: a model folder on the node.
	Model string
	// ServedName is the served model name (--served-model-name).
	ServedName string
	// Args are more `vllm serve` options (CheckLaunchArgs).
	Args []string
	// StartTimeoutMs bounds the start until /health answers (0:
	// DefaultStartTimeout).
	StartTimeoutMs int64
	// APIKey is the servers' --api-key (given them as VLLM_API_KEY, out
	// of the process list): LaunchServers makes one per launch.
	APIKey string
	// Folders, when set, says where the driver serves its folders from:
	// a server whose node does not see Folders.Probe in the run folder
	// serves a copy of Model fetched onto its node, and answers
	// StageRequest with copies too. Nil: every node sees Model and the
	// folders it loads.
	Folders *learner.Folders
}

// ServerURLRequest asks a server actor where its server listens; the
// reply is ServerURL.
type ServerURLRequest struct{}

// ServerURL answers ServerURLRequest.
type ServerURL struct {
	URL string
	// Devices are the CUDA_VISIBLE_DEVICES the server was started with
	// (empty: it holds no GPU and inherited the node's).
	Devices string
	PID     int
	// Log is the server's output on its node.
	Log string
	// Staged says the server's node does not see the run folder: it
	// serves a copy of the model, and reads each folder it loads from the
	// copy StageRequest makes.
	Staged bool
}

// StageRequest asks a server actor for the path its server reads folder
// Dir (absolute, on the driver's host) from: Dir itself where its node
// sees the run folder; else a copy fetched onto its node, each file
// checked by size and SHA-256, of which it keeps the newest two (the one
// loading and the one before). The reply is StagedPath.
type StageRequest struct {
	Dir string
}

// StagedPath answers StageRequest.
type StagedPath struct {
	Path string
}

func init() {
	actor.RegisterMessage(LaunchArgs{}, ServerURLRequest{}, ServerURL{}, ServerExited{}, StageRequest{}, StagedPath{})
	actor.RegisterKind(ServerKind, newServerActor)
}

var launchCommand atomic.Pointer[[]string]

// OfferServers makes this process's nodes launch vLLM servers with
// command (e.g. "vllm", "serve"; the model and options follow it): a node
// started with it should carry LaunchLabel. Without it a server actor
// placed here refuses to start.
func OfferServers(command []string) error {
	if len(command) == 0 || command[0] == "" {
		return errors.New("vllm launch command is empty")
	}
	c := slices.Clone(command)
	launchCommand.Store(&c)
	return nil
}

// DefaultCommand is the command a run's own node launches servers with:
// $RLNODE_VLLM_COMMAND split at spaces, or "vllm serve".
func DefaultCommand() []string {
	if c := strings.Fields(os.Getenv(launchEnvCommandName)); len(c) > 0 {
		return c
	}
	return []string{"vllm", "serve"}
}

var launchedHere atomic.Int32

// ports keeps each server actor's port across its restarts in place, so
// that the URL the run's client holds reaches the new process.
var ports sync.Map // actor name → int

// stagings keeps each staged server actor's copies across its restarts
// in place (a model is fetched once per node); Stopped removes them.
var stagings sync.Map // actor name → *serverStaging

// serverStaging is what a server on a node that does not see the run
// folder holds there: the model's copy, and the newest keepStaged folders
// it was told to load.
type serverStaging struct {
	mu    sync.Mutex
	st    *learner.Staging
	model string
	kept  []stagedCopy // oldest first
}

type stagedCopy struct {
	dir, local string
	done       func()
}

// openStaging is the staging of server actor name, reused across its
// restarts in place: nil where its node sees the run folder (or a
// carries no Folders). A new one fetches the model first.
func openStaging(ctx *actor.Context, a LaunchArgs) (*serverStaging, error) {
	name := ctx.Self().Name
	if v, ok := stagings.Load(name); ok {
		return v.(*serverStaging), nil
	}
	st, err := learner.OpenStaging(ctx.System(), a.Folders, name)
	if err != nil || st == nil {
		return nil, err
	}
	local, _, err := st.Fetch(ctx.Context(), a.Model) // removed with the staging folder
	if err != nil {
		st.Close()
		return nil, fmt.Errorf("vllm server: stage model %s on node %s: %w", a.Model, ctx.System().Address(), err)
	}
	ss := &serverStaging{st: st, model: local}
	stagings.Store(name, ss)
	return ss, nil
}

// stage fetches dir onto the node and removes all but the newest
// keepStaged copies.
func (ss *serverStaging) stage(ctx context.Context, dir string) (string, error) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	local, done, err := ss.st.Fetch(ctx, dir)
	if err != nil {
		return "", err
	}
	ss.kept = append(ss.kept, stagedCopy{dir: dir, local: local, done: done})
	for len(ss.kept) > keepStaged {
		ss.kept[0].done()
		ss.kept = ss.kept[1:]
	}
	return local, nil
}

// closeStaging removes server actor name's copies.
func closeStaging(name string) {
	if v, ok := stagings.LoadAndDelete(name); ok {
		v.(*serverStaging).st.Close()
	}
}

// ServerExited tells a server actor that its process ended without being
// stopped: the actor panics, and so is restarted in place (a new process
// on the same port) while it has restarts left.
type ServerExited struct{}

// ServerRestarts is how often a launched server is started again after
// its process ended by itself (a crash, an out-of-memory kill).
const ServerRestarts = 3

type serverActor struct {
	url, devices, log string
	staging           *serverStaging // nil: its node sees the run folder
	noted             bool
	cmd               *exec.Cmd
	exited            chan struct{} // closed when the process has been waited for
	waitErr           error
	stopping          atomic.Bool
	stopOnce          sync.Once
}

func newServerActor(ctx *actor.Context, args any) (actor.Actor, error) {
	a, ok := args.(LaunchArgs)
	if !ok {
		return nil, fmt.Errorf("vllm server: spawn args are %T, want vllm.LaunchArgs", args)
	}
	cmdp := launchCommand.Load()
	if cmdp == nil {
		return nil, fmt.Errorf("vllm server: node %s does not launch vLLM servers (start it with --vllm COMMAND)", ctx.System().Address())
	}
	// Both go on the command line before the options: neither may read as
	// one (a model "--trust-remote-code" would be taken for the flag).
	if !filepath.IsAbs(a.Model) || a.ServedName == "" || strings.HasPrefix(a.ServedName, "-") || len(a.Model)+len(a.ServedName) > 2*MaxLaunchArgLen {
		return nil, fmt.Errorf("vllm server: model %q, served model name %q: want an absolute folder and a name that does not start with -", a.Model, a.ServedName)
	}
	if err := CheckLaunchArgs(a.Args); err != nil {
		return nil, fmt.Errorf("vllm server: %w", err)
	}
	timeout := time.Duration(a.StartTimeoutMs) * time.Millisecond
	if timeout <= 0 {
		timeout = DefaultStartTimeout
	}
	if timeout > MaxStartTimeout {
		return nil, fmt.Errorf("vllm server: start timeout %v over %v", timeout, MaxStartTimeout)
	}
	if n := launchedHere.Add(1); n > maxLaunchedPerNode {
		launchedHere.Add(-1)
		return nil, fmt.Errorf("vllm server: %d servers already run on node %s, the most one node launches", maxLaunchedPerNode, ctx.System().Address())
	}
	ss, err := openStaging(ctx, a)
	if err != nil {
		launchedHere.Add(-1)
		return nil, err
	}
	if ss != nil {
		a.Model = ss.model
	}
	s, err := startServer(ctx, *cmdp, a, timeout)
	if err != nil {
		launchedHere.Add(-1)
		ports.Delete(ctx.Self().Name)
		closeStaging(ctx.Self().Name)
		return nil, err
	}
	s.staging = ss
	return s, nil
}

// startServer runs the server and waits for its /health.
func startServer(ctx *actor.Context, command []string, a LaunchArgs, timeout time.Duration) (*serverActor, error) {
	host, _, err := net.SplitHostPort(ctx.System().Address())
	if err != nil || host == "" {
		host = "127.0.0.1"
	}
	var port int
	if p, ok := ports.Load(ctx.Self().Name); ok {
		port = p.(int) // a restart in place: the URL stays
	} else if port, err = freePort(host); err != nil {
		return nil, fmt.Errorf("vllm server: pick a port on %s: %w", host, err)
	}
	ports.Store(ctx.Self().Name, port)
	s := &serverActor{url: "http://" + net.JoinHostPort(host, strconv.Itoa(port)), exited: make(chan struct{})}
	dir := filepath.Join(os.TempDir(), "rlnode-vllm")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("vllm server: log folder: %w", err)
	}
	s.log = filepath.Join(dir, safeName(ctx.Self().Name)+".log")
	flags := os.O_CREATE | os.O_WRONLY | os.O_TRUNC
	if ctx.Restarts() > 0 {
		flags = os.O_CREATE | os.O_WRONLY | os.O_APPEND // the crash's lines stay above
	}
	logf, err := os.OpenFile(s.log, flags, 0o600)
	if err != nil {
		return nil, fmt.Errorf("vllm server: log: %w", err)
	}
	fmt.Fprintf(logf, "=== rlnode: %s starts %s (restart %d) ===\n", ctx.Self().Name, command[0], ctx.Restarts())
	argv := append(slices.Clone(command[1:]), a.Model, "--served-model-name", a.ServedName, "--host", host, "--port", strconv.Itoa(port))
	argv = append(argv, a.Args...)
	cmd := exec.Command(command[0], argv...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = serverProcAttr()
	env := append(os.Environ(), "VLLM_SERVER_DEV_MODE=1", "VLLM_API_KEY="+a.APIKey)
	if gpus := cluster.ActorGPUs(ctx); len(gpus) > 0 {
		parent, set := os.LookupEnv("CUDA_VISIBLE_DEVICES")
		s.devices = childDevices(gpus, parent, set)
		env = append(env, "CUDA_VISIBLE_DEVICES="+s.devices)
	}
	cmd.Env = env
	sys, self := ctx.System(), ctx.Self()
	started := make(chan error, 1)
	go func() {
		// Pdeathsig fires when the thread that started the process ends,
		// not the node's process: the thread stays this goroutine's until
		// the server has exited, or the runtime retiring it would kill a
		// healthy server.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		s.waitErr = cmd.Wait()
		logf.Close()
		close(s.exited)
		if !s.stopping.Load() {
			_ = sys.Tell(self, ServerExited{}) // gone by itself: restart
		}
	}()
	if err := <-started; err != nil {
		logf.Close()
		return nil, fmt.Errorf("vllm server: start %s: %w", command[0], err)
	}
	s.cmd = cmd
	if err := s.awaitHealth(ctx.Context(), timeout); err != nil {
		s.stopping.Store(true)
		s.stop()
		return nil, err
	}
	ctx.Logger().Info("vLLM server started", "url", s.url, "devices", s.devices, "pid", cmd.Process.Pid, "log", s.log, "model", a.Model)
	return s, nil
}

// awaitHealth polls /health until it answers 200, the process exits,
// timeout passes or ctx ends.
func (s *serverActor) awaitHealth(ctx context.Context, timeout time.Duration) error {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(healthPollEvery)
	defer tick.Stop()
	client := &http.Client{Timeout: 5 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.url+"/health", nil)
		if resp, err := client.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-s.exited:
			return fmt.Errorf("vllm server: %s exited before it served (%v); the end of its log %s:\n%s", s.cmd.Path, s.waitErr, s.log, tailOf(s.log))
		case <-deadline.C:
			return fmt.Errorf("vllm server: %s did not answer /health within %v (engines.*.vllm.launch.start_timeout); the end of its log %s:\n%s", s.url, timeout, s.log, tailOf(s.log))
		case <-ctx.Done():
			return fmt.Errorf("vllm server: start abandoned: %w", ctx.Err())
		case <-tick.C:
		}
	}
}

// Receive implements actor.Actor.
func (s *serverActor) Receive(ctx *actor.Context, msg any) (any, error) {
	switch m := msg.(type) {
	case StageRequest:
		if !filepath.IsAbs(m.Dir) {
			return nil, fmt.Errorf("vllm server %s: stage %q: not an absolute folder", s.url, m.Dir)
		}
		if s.staging == nil {
			return StagedPath{Path: m.Dir}, nil
		}
		p, err := s.staging.stage(ctx.Context(), m.Dir)
		if err != nil {
			return nil, fmt.Errorf("vllm server %s: stage %s on node %s: %w", s.url, m.Dir, ctx.System().Address(), err)
		}
		return StagedPath{Path: p}, nil
	case ServerExited:
		if s.stopping.Load() {
			return nil, nil
		}
		s.stop() // what the process left in its group
		panic(fmt.Sprintf("vllm server %s exited by itself (%v); the end of its log %s: %s", s.url, s.waitErr, s.log, lastLine(s.log)))
	case ServerURLRequest:
		select {
		case <-s.exited:
			return nil, fmt.Errorf("vllm server %s exited (%v); the end of its log %s:\n%s", s.url, s.waitErr, s.log, tailOf(s.log))
		default:
		}
		if !s.noted {
			// Its record exists once it was built: status shows where it serves.
			s.noted = true
			if n := cluster.ActorNode(ctx); n != nil {
				note := "serving " + s.url
				if s.devices != "" {
					note += " on CUDA devices " + s.devices
				}
				if s.staging != nil {
					note += ", a copy of the model in " + s.staging.model
				}
				_ = n.SetNote(ctx.Self().Name, note+", log "+s.log)
			}
		}
		return ServerURL{URL: s.url, Devices: s.devices, PID: s.cmd.Process.Pid, Log: s.log, Staged: s.staging != nil}, nil
	}
	return nil, fmt.Errorf("vllm server: unexpected %T", msg)
}

// Stopped implements actor.Stopper: the server's process group gets
// SIGTERM, then SIGKILL after serverStopGrace.
func (s *serverActor) Stopped(ctx *actor.Context) {
	s.stopping.Store(true)
	s.stop()
	ports.Delete(ctx.Self().Name)
	closeStaging(ctx.Self().Name)
}

func (s *serverActor) stop() {
	s.stopOnce.Do(func() {
		defer launchedHere.Add(-1)
		pgid := s.cmd.Process.Pid
		_ = syscall.Kill(-pgid, syscall.SIGTERM)
		select {
		case <-s.exited:
		case <-time.After(serverStopGrace):
		}
		_ = syscall.Kill(-pgid, syscall.SIGKILL) // what the server left behind too
		<-s.exited
	})
}

// childDevices maps the node's CUDA ordinals to the CUDA_VISIBLE_DEVICES
// a child process needs: through the node's own list where it has one.
func childDevices(ordinals []int, parent string, set bool) string {
	var list []string
	if set {
		list = strings.Split(parent, ",")
	}
	out := make([]string, len(ordinals))
	for i, o := range ordinals {
		if set && o < len(list) {
			out[i] = strings.TrimSpace(list[o])
		} else {
			out[i] = strconv.Itoa(o)
		}
	}
	return strings.Join(out, ",")
}

func freePort(host string) (int, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

var unsafeChars = regexp.MustCompile(`[^A-Za-z0-9._-]`)

func safeName(s string) string { return unsafeChars.ReplaceAllString(s, "_") }

// lastLine is the last line of the file at path, at most 512 bytes: a
// restart's cause.
func lastLine(path string) string {
	t := tailOf(path)
	if i := strings.LastIndexByte(t, '\n'); i >= 0 {
		t = t[i+1:]
	}
	if len(t) > 512 {
		t = t[len(t)-512:]
	}
	return t
}

// tailOf is the last launchLogTail bytes of the file at path.
func tailOf(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return "(" + err.Error() + ")"
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return "(" + err.Error() + ")"
	}
	off := max(st.Size()-launchLogTail, 0)
	buf := make([]byte, st.Size()-off)
	n, _ := f.ReadAt(buf, off)
	return string(bytes.TrimSpace(buf[:n]))
}

// Launch is a set of servers to start for one policy.
type Launch struct {
	// Servers is how many (each its own process); GPUs how many GPUs each
	// holds (0: none, a server on the CPU).
	Servers int
	GPUs    float64
	LaunchArgs
}

// Launched are servers started by LaunchServers.
type Launched struct {
	URLs    []string
	APIKey  string // every server's --api-key
	handles []*cluster.Handle
}

// LaunchServers starts l.Servers server actors named prefix-0, prefix-1,
// … on nodes that launch servers (LaunchLabel), at once, and waits for each
// to serve. On an error the ones started are stopped.
func LaunchServers(ctx context.Context, node *cluster.Node, prefix string, l Launch) (*Launched, error) {
	if l.Servers < 1 {
		return nil, fmt.Errorf("vllm launch: %d servers: want at least 1", l.Servers)
	}
	res := cluster.Resources{}
	if l.GPUs > 0 {
		res[cluster.GPU] = l.GPUs
	}
	// A server restarted on another node after its node is lost starts
	// there as it did here (and fetches the model where that node does not
	// see it).
	restartTimeout := time.Duration(l.StartTimeoutMs) * time.Millisecond
	if restartTimeout <= 0 {
		restartTimeout = DefaultStartTimeout
	}
	restartTimeout = min(restartTimeout+stageAllowance, cluster.MaxRestartTimeout)
	var kb [24]byte
	_, _ = rand.Read(kb[:])
	l.APIKey = hex.EncodeToString(kb[:])
	out := &Launched{URLs: make([]string, l.Servers), APIKey: l.APIKey, handles: make([]*cluster.Handle, l.Servers)}
	errs := make([]error, l.Servers)
	var wg sync.WaitGroup
	for i := range l.Servers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := fmt.Sprintf("%s-%d", prefix, i)
			h, err := node.Spawn(ctx, ServerKind, cluster.SpawnOptions{Name: name, Args: l.LaunchArgs, Resources: res,
				Labels: map[string]string{LaunchLabel: "on"}, MaxRestarts: ServerRestarts, RestartTimeout: restartTimeout})
			if err != nil {
				errs[i] = fmt.Errorf("vllm server %s: %w", name, err)
				return
			}
			out.handles[i] = h
			u, err := cluster.Call[ServerURL](ctx, h, ServerURLRequest{})
			if err != nil {
				errs[i] = fmt.Errorf("vllm server %s: %w", name, err)
				return
			}
			out.URLs[i] = u.URL
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		out.Stop(context.WithoutCancel(ctx))
		return nil, err
	}
	return out, nil
}

// Locate is where server i (in URLs' order) serves now, for
// Config.Locate: it moves when its node is lost and the cluster starts it
// on another. A server restarting, or gone for good, is an error saying
// so.
func (l *Launched) Locate(ctx context.Context, i int) (Location, error) {
	if i < 0 || i >= len(l.handles) || l.handles[i] == nil {
		return Location{}, fmt.Errorf("vllm launch: no server %d", i)
	}
	h := l.handles[i]
	rec, ok := h.Record()
	switch {
	case !ok:
		return Location{}, fmt.Errorf("server actor %s: no record in the cluster", h.Name())
	case rec.State == cluster.Dead:
		return Location{}, fmt.Errorf("server actor %s is gone: %s", h.Name(), rec.Cause)
	case rec.State != cluster.Alive:
		return Location{}, fmt.Errorf("server actor %s is %s (%s)", h.Name(), rec.State, rec.Cause)
	}
	cctx, cancel := context.WithTimeout(ctx, locateTimeout)
	defer cancel()
	u, err := cluster.Call[ServerURL](cctx, h, ServerURLRequest{})
	if err != nil {
		return Location{}, fmt.Errorf("server actor %s on node %s: %w", h.Name(), rec.Node, err)
	}
	return Location{URL: u.URL, Process: fmt.Sprintf("%s/%d", rec.Node, u.PID), Staged: u.Staged}, nil
}

// Stage is the path server i reads dir from (StageRequest), for
// Config.Stage; the driver's folder server must offer dir.
func (l *Launched) Stage(ctx context.Context, i int, dir string) (string, error) {
	if i < 0 || i >= len(l.handles) || l.handles[i] == nil {
		return "", fmt.Errorf("vllm launch: no server %d", i)
	}
	r, err := cluster.Call[StagedPath](ctx, l.handles[i], StageRequest{Dir: dir})
	if err != nil {
		if serverGone(err) {
			return "", fmt.Errorf("%w: %w", ErrServerMissing, err)
		}
		return "", err
	}
	return r.Path, nil
}

// ErrServerMissing is a Config.Stage failure because the server's actor
// is gone (its node lost or unresponsive, the actor dead or not found):
// the update goes on without that server, as without one Locate does not
// find.
var ErrServerMissing = errors.New("vllm server missing")

// serverGone reports whether err is a call to a server actor that could
// not reach it or that it did not live to answer.
func serverGone(err error) bool {
	for _, e := range []error{actor.ErrNodeLost, actor.ErrConnLost, actor.ErrActorDied, actor.ErrActorNotFound, cluster.ErrNodeUnresponsive, cluster.ErrNodeGone} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// Stop stops every server (each waits up to serverStopGrace for its
// process to exit).
func (l *Launched) Stop(ctx context.Context) {
	if l == nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, serverStopGrace+10*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for _, h := range l.handles {
		if h == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = h.Stop(ctx)
		}()
	}
	wg.Wait()
}
