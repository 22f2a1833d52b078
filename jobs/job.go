package jobs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/rlnode/rlnode/actor"
	"github.com/rlnode/rlnode/cluster"
	"github.com/rlnode/rlnode/internal/atomicfile"
	"github.com/rlnode/rlnode/internal/outpath"
	"github.com/rlnode/rlnode/internal/runlock"
)

// Kind is the job actor's kind; Label marks the nodes that run jobs
// (rlnode start and join set it; a node a Go program starts runs none).
const (
	Kind  = "rlnode.job"
	Label = "rlnode.jobs"
)

// EnvJob names the job in its driver's environment; the driver's node
// carries it as label DriverLabel, so a node that takes the job over can
// tell when the lost attempt's driver has left the cluster.
const (
	EnvJob      = "RLNODE_JOB"
	DriverLabel = "rlnode.job"
)

// Files a job keeps in its run folder beside the run's own: the log of
// every attempt's driver (stdout and stderr, one header line per attempt)
// and the recipe it was submitted with.
const (
	LogFile    = "job.log"
	RecipeFile = "job-recipe.yaml"
)

// Spec is what a job runs: a resolved recipe into a run folder.
type Spec struct {
	Recipe      []byte // the resolved recipe (YAML), as `rlnode recipe` writes it
	RecipeName  string
	Out         string // absolute run folder
	SubmittedMs int64
	// Submitter says who submitted it (user@host).
	Submitter string
	// Resume continues the run Out holds (rlnode run --continue); without
	// it the first attempt refuses a folder that holds a run or a job.
	Resume bool `msgpack:",omitempty"`
}

// MaxRecipeBytes bounds Spec.Recipe: it travels in the job's record.
const MaxRecipeBytes = 48 << 10

// Check refuses a spec no node should run.
func (s Spec) Check() error {
	switch {
	case len(s.Recipe) == 0:
		return errors.New("job: no recipe")
	case len(s.Recipe) > MaxRecipeBytes:
		return fmt.Errorf("job: recipe of %d bytes, over the %d-byte bound", len(s.Recipe), MaxRecipeBytes)
	case s.Out == "" || !filepath.IsAbs(s.Out):
		return fmt.Errorf("job: run folder %q: want an absolute path (every node resolves it alike)", s.Out)
	case strings.ContainsAny(s.Out, "\x00\n"):
		return fmt.Errorf("job: run folder %q: holds a NUL or newline", s.Out)
	}
	return nil
}

var namePattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// CheckName refuses a job name that is no plain word of at most 64
// characters (letters, digits, . _ -).
func CheckName(name string) error {
	if !namePattern.MatchString(name) {
		return fmt.Errorf("job name %q: want 1 to 64 letters, digits, '.', '_' or '-', starting with a letter or digit", name)
	}
	return nil
}

// Config is what the node gives its jobs.
type Config struct {
	// KeyFile is the cluster key file the node was started with: a job's
	// driver joins the cluster with it.
	KeyFile string
	// RunsDir is where a job submitted without a run folder (from a host
	// without a node, which cannot name one of its own) gets one,
	// RunsDir/RECIPE-DATE[-N]; empty: such a submit is refused.
	RunsDir string
	// Check checks a submitted recipe (resolved, YAML) on this node's
	// host before the job is taken: files it names that this host does
	// not see are refused at submit, not when the driver starts. nil:
	// not checked here.
	Check func(recipe []byte) error
	// Resolve reads a recipe submitted as written (SubmitRequest.Source)
	// on this host: its text, or a built-in recipe's name with no text,
	// with overrides; relative paths in the text are relative to dir,
	// those of the overrides to setsDir (both "": this process's working
	// folder). It returns the recipe resolved and checked, and its name.
	// nil: such a submit is refused.
	Resolve func(name string, src []byte, dir, setsDir string, sets []string) (resolved []byte, recipeName string, err error)
	// PackagesDir is where uploaded working dirs wait for their submit
	// (SubmitRequest.WorkingDir); empty: uploads are refused.
	PackagesDir string
	// CheckTime bounds Check and Resolve, run one at a time on a node
	// (they read the datasets and files a recipe names, up to a GiB):
	// past it, waiting for its turn included, the submit is refused
	// (503) and never taken. 0: MaxCheckTime.
	CheckTime time.Duration
	// Executable is the rlnode binary a job runs (default: this one).
	Executable string
	// StopGrace is how long a job's driver has, once asked to stop with
	// SIGTERM because its actor stops (its node stops, rlnode job stop
	// --now), before SIGKILL (default 10 s).
	StopGrace time.Duration
}

// host is this process's node and its jobs' config, set by Serve; a
// process that did not call it runs no jobs.
var host struct {
	sync.Mutex
	node  *cluster.Node
	cfg   Config
	store *packageStore // nil: no PackagesDir
}

func hosting() (*cluster.Node, Config, error) {
	host.Lock()
	defer host.Unlock()
	if host.node == nil {
		return nil, Config{}, errors.New("this process runs no jobs (it is no node rlnode start or join started)")
	}
	return host.node, host.cfg, nil
}

type logRequest struct {
	Offset int64
	Max    int
}

type logReply struct {
	Data []byte
	Next int64 // the offset after Data
	Size int64 // the log's size now
}

// stopRequest asks the job's driver to stop after its current step,
// which it checkpoints (SIGTERM); Now kills it at once.
type stopRequest struct{ Now bool }

type okReply struct{}

func init() {
	actor.RegisterMessage(Spec{}, logRequest{}, logReply{}, stopRequest{}, okReply{})
	actor.RegisterKind(Kind, func(ctx *actor.Context, args any) (actor.Actor, error) {
		spec, ok := args.(Spec)
		if !ok {
			return nil, fmt.Errorf("job: spawn args are %T, want jobs.Spec", args)
		}
		return start(ctx, spec)
	})
}

// job is the actor: it runs the job's driver process, again each time
// the run found no room, and waits for it.
type job struct {
	name string
	spec Spec
	done chan struct{} // closed when the driver has exited and the log is closed

	mu        sync.Mutex
	proc      *os.Process   // the driver, once started
	stopAsked bool          // stopRequest: its end is a stop, not a failure
	stopCh    chan struct{} // closed with stopAsked set: ends a pause at once
	stopping  bool          // the actor is stopping: the driver's end says nothing
}

// start runs the job's driver: `rlnode run` of the recipe into its
// folder, joined to this node's cluster; an attempt after the job's node
// was lost or stopped waits for the lost driver to be gone and continues
// the run (--continue).
func start(actx *actor.Context, spec Spec) (*job, error) {
	node, cfg, err := hosting()
	if err != nil {
		return nil, err
	}
	if err := spec.Check(); err != nil {
		return nil, err
	}
	name := actx.Self().Name
	if actx.Restarts() == 0 && spec.Resume {
		if err := holdsARun(spec.Out); err != nil {
			hostname, _ := os.Hostname()
			return nil, fmt.Errorf("job %s: node %s (host %s) cannot continue its run (%w): %w", name, node.ID(), hostname, cluster.ErrTryElsewhere, err)
		}
	}
	if actx.Restarts() > 0 {
		if err := seesRunFolder(spec.Out); err != nil {
			hostname, _ := os.Hostname()
			return nil, fmt.Errorf("job %s: node %s (host %s) cannot take it over (%w): %w; the run is not started over here in an empty folder. "+
				"To continue it from its newest checkpoint, run `rlnode submit %s --resume --out %s` on a host that sees the folder (that of the lost attempt's node, once it is back, or one you copy the folder to), "+
				"and give later jobs an --out on a filesystem every node mounts",
				name, node.ID(), hostname, cluster.ErrTryElsewhere, err, filepath.Join(spec.Out, RecipeFile), spec.Out)
		}
	}
	if actx.Restarts() == 0 && !spec.Resume {
		// Nothing of another run or job is written over.
		for _, f := range []string{"recipe.yaml", LogFile, RecipeFile} {
			if _, err := os.Lstat(filepath.Join(spec.Out, f)); err == nil {
				return nil, fmt.Errorf("job %s: run folder %s on node %s holds another run or job (%s): choose another folder, or submit with --resume to continue its run",
					name, spec.Out, node.ID(), f)
			}
		}
	}
	if err := outpath.MkdirAll(spec.Out); err != nil {
		return nil, fmt.Errorf("job %s: run folder on node %s: %w", name, node.ID(), err)
	}
	// The log is created first, and by one job only on a first attempt:
	// of two jobs started into one folder at once, the second finds it
	// and writes nothing (its recipe would have replaced the first's).
	flags := os.O_WRONLY | os.O_APPEND | os.O_CREATE
	if actx.Restarts() == 0 && !spec.Resume {
		flags |= os.O_EXCL
	}
	logf, err := os.OpenFile(filepath.Join(spec.Out, LogFile), flags, 0o644)
	if errors.Is(err, fs.ErrExist) {
		return nil, fmt.Errorf("job %s: run folder %s on node %s holds another run or job (%s): choose another folder, or submit with --resume to continue its run",
			name, spec.Out, node.ID(), LogFile)
	}
	if err != nil {
		return nil, fmt.Errorf("job %s: log: %w", name, err)
	}
	recipe := filepath.Join(spec.Out, RecipeFile)
	if err := atomicfile.WriteFile(recipe, spec.Recipe, 0o644); err != nil {
		logf.Close()
		return nil, fmt.Errorf("job %s: %w", name, err)
	}
	exe := cfg.Executable
	if exe == "" {
		if exe, err = os.Executable(); err != nil {
			logf.Close()
			return nil, fmt.Errorf("job %s: this node's executable: %w", name, err)
		}
	}
	args := driverArgs(spec, recipe, node.GossipAddress(), cfg.KeyFile, actx.Restarts())
	attempt := actx.Restarts() + 1
	hostname, _ := os.Hostname()
	fmt.Fprintf(logf, "%s rlnode job %s: attempt %d on node %s (%s): rlnode %s\n",
		time.Now().UTC().Format(time.RFC3339), name, attempt, node.ID(), hostname, strings.Join(args, " "))
	// driver is the driver's process: in the run folder, writing to the
	// job's log, in a process group of its own.
	driver := func(args []string) *exec.Cmd {
		cmd := exec.Command(exe, args...)
		cmd.Stdout, cmd.Stderr = logf, logf
		cmd.Dir = spec.Out
		cmd.Env = append(os.Environ(), EnvJob+"="+name)
		cmd.SysProcAttr = driverAttrs()
		return cmd
	}
	cmd := driver(args)
	j := &job{name: name, spec: spec, done: make(chan struct{}), stopCh: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		if actx.Restarts() > 0 {
			// The lost attempt's driver and what it placed must be gone
			// first: its actors hold the cluster's resources until its
			// owner grace ends, and the new driver would find no room.
			waitForLostDriver(actx.Context(), node, name, logf, j.stopWasAsked)
			waitForRunLock(actx.Context(), spec.Out, name, logf, j.stopWasAsked)
		}
		if actx.Context().Err() != nil {
			started <- actx.Context().Err()
			logf.Close()
			close(j.done)
			return
		}
		// The driver is killed when this thread ends (Pdeathsig), so it
		// dies with its node: the thread stays this goroutine's until the
		// driver has exited.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		// noRoom counts the driver's no-room exits in a row: one that ran
		// longer than the longest wait had room, so the next wait starts
		// short again.
		noRoom := 0
		for attempt := 0; ; attempt++ {
			t0 := time.Now()
			// A stop is checked and the driver started under the lock a
			// stopRequest takes: one asked in between is not missed.
			j.mu.Lock()
			if j.stopAsked {
				j.mu.Unlock()
				when := "before its driver started"
				if attempt > 0 {
					when = "while it waited for room"
				}
				fmt.Fprintf(logf, "%s rlnode job %s: stopped %s\n", time.Now().UTC().Format(time.RFC3339), name, when)
				if attempt == 0 {
					started <- errors.New("stopped")
				}
				logf.Close()
				close(j.done)
				j.end(actx, "job stopped: "+when)
				return
			}
			err := cmd.Start()
			if err == nil {
				j.proc = cmd.Process
			}
			j.mu.Unlock()
			if err != nil {
				fmt.Fprintf(logf, "%s rlnode job %s: start %s: %v\n", time.Now().UTC().Format(time.RFC3339), name, exe, err)
				if attempt == 0 {
					started <- err
				}
				logf.Close()
				close(j.done)
				j.end(actx, fmt.Sprintf("job failed: start %s: %v", exe, err))
				return
			}
			if attempt == 0 {
				started <- nil
			}
			werr := cmd.Wait()
			j.mu.Lock()
			j.proc = nil // its process group is gone: its pid may be another's
			again := !j.stopAsked && !j.stopping
			j.mu.Unlock()
			var ee *exec.ExitError
			if !again || !errors.As(werr, &ee) || ee.ExitCode() != ExitNoRoom || actx.Context().Err() != nil {
				j.finish(actx, logf, werr, time.Since(t0))
				return
			}
			// The cluster has no room for the run now, though it could
			// hold it: the job waits for room (PENDING) and starts its
			// driver again, which continues the run where it is.
			if time.Since(t0) > roomRetry {
				noRoom = 0
			}
			noRoom++
			why := pendingWhy(lastWord(logf.Name()), node.Record, node.Views())
			if !j.waitForRoom(actx, node, logf, why, roomRetryAfter(noRoom)) {
				if j.stopWasAsked() {
					continue // the loop's check ends the job
				}
				// The actor stops (its node stops, or another restarts it).
				fmt.Fprintf(logf, "%s rlnode job %s: its actor stopped here while it waited for room\n", time.Now().UTC().Format(time.RFC3339), name)
				logf.Close()
				close(j.done)
				return
			}
			cmd = driver(driverArgs(spec, recipe, node.GossipAddress(), cfg.KeyFile, 1))
			fmt.Fprintf(logf, "%s rlnode job %s: room may have freed; starting its driver again on node %s: rlnode %s\n",
				time.Now().UTC().Format(time.RFC3339), name, node.ID(), strings.Join(cmd.Args[1:], " "))
		}
	}()
	if actx.Restarts() == 0 {
		if err := <-started; err != nil {
			return nil, fmt.Errorf("job %s: start %s: %w", name, exe, err)
		}
	}
	return j, nil
}

// seesRunFolder is nil when this host sees the run folder that the job's
// earlier attempt wrote (on a filesystem they share, or this same host),
// else why not. Every attempt writes its log there before its driver
// starts, so a folder without it is not that attempt's: the folder is on
// the lost attempt's host alone, or was removed.
func seesRunFolder(out string) error {
	_, err := os.Stat(filepath.Join(out, LogFile))
	switch {
	case err == nil:
		return nil
	case errors.Is(err, fs.ErrNotExist):
		if _, derr := os.Stat(out); errors.Is(derr, fs.ErrNotExist) {
			return fmt.Errorf("this host does not see its run folder %s, which the lost attempt wrote on its own host (the folder is not on a filesystem both share, or was removed)", out)
		}
		return fmt.Errorf("its run folder %s here lacks the %s the lost attempt wrote there (this host's folder of that name is not the lost attempt's: not on a filesystem both share, or emptied)", out, LogFile)
	}
	return fmt.Errorf("its run folder %s: %w", out, err)
}

// holdsARun is nil when run folder out, which a job submitted with
// --resume continues, holds a run or a job here, else why not: a folder
// this host does not see would be made empty and the run started over.
func holdsARun(out string) error {
	for _, f := range []string{"recipe.yaml", LogFile, RecipeFile} {
		if _, err := os.Stat(filepath.Join(out, f)); err == nil {
			return nil
		}
	}
	if _, err := os.Stat(out); err != nil {
		return fmt.Errorf("this host does not see the run folder %s that --resume names (%v)", out, err)
	}
	return fmt.Errorf("the run folder %s that --resume names holds no run here (no recipe.yaml, %s or %s)", out, LogFile, RecipeFile)
}

// roomRetry bounds how long a job that waits for room goes without
// trying its driver again when nothing it can see has freed.
const roomRetry = 5 * time.Minute

// firstRoomRetry is how long a job waits, the first time its run found
// no room, before it tries its driver again though no room grew
// (roomRetryAfter).
const firstRoomRetry = 5 * time.Second

// roomRetryAfter is how long a job whose run found no room for the n-th
// time in a row waits before it tries its driver again when no room
// grows: firstRoomRetry, doubled each time, up to roomRetry. The room a
// run lacked may have been held by runs racing it for that room (jobs
// submitted together: each placed its learner, none found room for its
// rollout actors) whose drivers, failing as it did, freed it before this
// job began to wait: no room grew after that, and every such job waited
// roomRetry on an idle cluster.
func roomRetryAfter(n int) time.Duration {
	d := firstRoomRetry
	for i := 1; i < n && d < roomRetry; i++ {
		d *= 2
	}
	return min(d, roomRetry)
}

// waitForRoom marks the job PENDING (its record's note) with why, then
// waits until a node's free resources grow or a node that offers any
// joins, or retryAfter passes, and clears the mark. Jobs pending since
// earlier go first: this one waits 3 s for each (at most a minute), and
// waits on if the room was taken meanwhile, so that freed room does not
// start every pending job's driver at once. It is false when a stop was
// asked or the actor stops meanwhile.
func (j *job) waitForRoom(actx *actor.Context, node *cluster.Node, logf io.Writer, why string, retryAfter time.Duration) bool {
	fmt.Fprintf(logf, "%s rlnode job %s: the cluster has no room for its run now (%s); the job waits (PENDING) until room frees\n",
		time.Now().UTC().Format(time.RFC3339), j.name, why)
	// A driver that exits at once may beat the record of the job's
	// first attempt, which the note needs ALIVE: it is set again until
	// it is (without it the job showed RUNNING and no job counted it
	// ahead of them).
	noted := node.SetNote(j.name, PendingNote+why) == nil
	defer func() { _ = node.SetNote(j.name, "") }()
	seen := freeRoom(node.Views())
	deadline := time.Now().Add(retryAfter)
	for {
		if !j.pause(actx, 2*time.Second) {
			return false
		}
		if !noted {
			noted = node.SetNote(j.name, PendingNote+why) == nil
		}
		cur := freeRoom(node.Views())
		if !roomGrew(seen, cur) && time.Now().Before(deadline) {
			seen = cur
			continue
		}
		if ahead := pendingAhead(records(node), j.name, j.spec.SubmittedMs); ahead > 0 {
			d := time.Duration(min(ahead, 20)) * aheadWait
			fmt.Fprintf(logf, "%s rlnode job %s: room may have freed; %d jobs pending since earlier go first: it waits %s\n",
				time.Now().UTC().Format(time.RFC3339), j.name, ahead, d)
			if !j.pause(actx, d) {
				return false
			}
			if after := freeRoom(node.Views()); roomGrew(after, cur) {
				// A job ahead took the room: wait for more.
				seen, deadline = after, time.Now().Add(retryAfter)
				continue
			}
		}
		return true
	}
}

// aheadWait is how long a job that waits for room lets each job pending
// since earlier go first once room may have freed.
var aheadWait = 3 * time.Second

// pause waits d; false when a stop was asked or the actor stops first.
func (j *job) pause(actx *actor.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-actx.Context().Done():
		return false
	case <-j.stopCh:
		return false
	case <-t.C:
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	return !j.stopAsked && !j.stopping
}

// freeRoom is the free resources of each node that offers any.
func freeRoom(views []cluster.NodeView) map[string]cluster.Resources {
	out := map[string]cluster.Resources{}
	for _, v := range views {
		for _, amount := range v.Total {
			if amount > 0 {
				out[v.ID] = v.Free
				break
			}
		}
	}
	return out
}

// roomGrew says whether cur has room that before had not: a node, or
// more of a resource on one.
func roomGrew(before, cur map[string]cluster.Resources) bool {
	for id, free := range cur {
		old, known := before[id]
		if !known {
			return true
		}
		for k, amount := range free {
			if amount > old[k] {
				return true
			}
		}
	}
	return false
}

// pendingAhead counts the PENDING jobs among recs submitted before the
// job name submitted at ms (ties by name).
func pendingAhead(recs []cluster.ActorRecord, name string, ms int64) int {
	n := 0
	for _, rec := range recs {
		if rec.Name == name || rec.State != cluster.Alive || !strings.HasPrefix(rec.Note, PendingNote) {
			continue
		}
		in := info(rec)
		if in.SubmittedMs < ms || (in.SubmittedMs == ms && rec.Name < name) {
			n++
		}
	}
	return n
}

// lostDriverWait bounds how long a job taken over waits for the lost
// attempt's driver to leave and its actors to be released.
const lostDriverWait = 3 * time.Minute

// waitForLostDriver waits, within ctx and lostDriverWait, until no node
// of the cluster is a driver of job name and nothing is held for gone
// owners, saying in the log what it waits for.
func waitForLostDriver(ctx context.Context, node *cluster.Node, name string, logf io.Writer, stopAsked func() bool) {
	deadline := time.Now().Add(lostDriverWait)
	said := ""
	for time.Now().Before(deadline) && ctx.Err() == nil && !stopAsked() {
		why := ""
		for _, v := range node.Views() {
			if v.Labels[DriverLabel] == name {
				why = "the lost attempt's driver, node " + v.ID + ", to leave the cluster"
			}
		}
		if why == "" {
			if held := node.HeldForGoneOwners(); held != "" {
				why = "the lost attempt's actors to be released: " + held
			}
		}
		if why == "" {
			return
		}
		if why != said {
			fmt.Fprintf(logf, "%s rlnode job %s: waiting for %s\n", time.Now().UTC().Format(time.RFC3339), name, why)
			said = why
		}
		select {
		case <-ctx.Done():
		case <-time.After(500 * time.Millisecond):
		}
	}
	if ctx.Err() == nil && !stopAsked() {
		fmt.Fprintf(logf, "%s rlnode job %s: waited %v; starting the driver all the same\n", time.Now().UTC().Format(time.RFC3339), name, lostDriverWait)
	}
}

// runLockWait bounds how long a job taken over waits for the run lock.
const runLockWait = 10 * time.Minute

// waitForRunLock waits, within ctx and runLockWait, until no process
// holds the run lock of dir: the lost attempt's driver may live on where
// this node cannot see it (beyond a partition, its node frozen), and a
// driver started meanwhile would fail at once ("in use by another run").
// That driver stops once it has lost its actors, which the cluster stops
// after its owner grace.
func waitForRunLock(ctx context.Context, dir, name string, logf io.Writer, stopAsked func() bool) {
	deadline := time.Now().Add(runLockWait)
	said := false
	for time.Now().Before(deadline) && ctx.Err() == nil && !stopAsked() {
		holder, held := runlock.Held(dir)
		if !held {
			return
		}
		if !said {
			fmt.Fprintf(logf, "%s rlnode job %s: waiting for the run lock of %s, held by %s (the lost attempt's driver lives on somewhere: it stops once its actors are gone)\n",
				time.Now().UTC().Format(time.RFC3339), name, dir, holder)
			said = true
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

func (j *job) stopWasAsked() bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.stopAsked
}

// driverArgs is the driver's command line after the executable.
func driverArgs(spec Spec, recipe, gossip, keyFile string, restarts int) []string {
	args := []string{"run", recipe, "--out", spec.Out, "--address", gossip, "--driver-only"}
	if keyFile != "" {
		args = append(args, "--key-file", keyFile)
	}
	if h, _, err := net.SplitHostPort(gossip); err == nil {
		args = append(args, "--bind", net.JoinHostPort(h, "0"))
	}
	if restarts > 0 || spec.Resume {
		// The run decides under its run lock: resume from the newest
		// intact checkpoint, or start over where the lost attempt (or the
		// run submitted again) wrote none.
		args = append(args, "--continue")
	}
	return args
}

// finish records the driver's end in the log and ends the actor with the
// job's outcome as its cause, unless the actor is stopping already.
func (j *job) finish(actx *actor.Context, logf *os.File, werr error, took time.Duration) {
	j.mu.Lock()
	stopAsked, stopping := j.stopAsked, j.stopping
	j.mu.Unlock()
	code := 0
	var ee *exec.ExitError
	switch {
	case werr == nil:
	case errors.As(werr, &ee):
		code = ee.ExitCode()
	default:
		code = -1
	}
	var cause string
	switch {
	case werr == nil:
		cause = "job succeeded"
	case stopAsked:
		cause = fmt.Sprintf("job stopped: its run was asked to stop and exited (%v)", werr)
	case stopping:
		// The actor stops: its node stops (another node takes the job
		// over while it has restarts left) or it was fenced.
		cause = fmt.Sprintf("the job's actor stopped here, and its driver with it (%v)", werr)
	default:
		cause = fmt.Sprintf("job failed: rlnode run %v", werr)
		if line := lastLine(logf.Name()); line != "" {
			cause += ": " + line
		}
	}
	fmt.Fprintf(logf, "%s rlnode job %s: driver exited (status %d) after %s: %s\n",
		time.Now().UTC().Format(time.RFC3339), j.name, code, took.Round(time.Second), cause)
	logf.Close()
	close(j.done)
	if !stopping {
		j.end(actx, cause)
	}
}

// end stops the actor with the job's outcome as its cause.
func (j *job) end(actx *actor.Context, cause string) {
	go func() { _ = actx.System().StopLocal(j.name, cause) }()
}

// ExitNoRoom is rlnode run's exit status when the run could not be
// placed for want of free room that the cluster could give once others
// release it (cluster.ErrNoRoom): a job's driver that exits so is started
// again once room may have freed, the job PENDING meanwhile.
const ExitNoRoom = 75

// PendingNote begins the note (cluster.Node.SetNote) of a job that waits
// for room; the rest says what its run lacked.
const PendingNote = "waiting for room: "

// ResumeHint begins the line a failed `rlnode run` writes after its
// error when the run can be continued from a checkpoint; lastLine passes
// over it, since it says nothing of why the run failed.
const ResumeHint = "rlnode run: once the cause is fixed, continue from checkpoint "

// logLine matches a line of the driver's logger (log/slog's text form),
// as its gossip writes on its way out ("node lost", "node left"): no cause.
var logLine = regexp.MustCompile(`^(rlnode run: )?(time=\S+ )?level=[A-Z]+ `)

// lastLine is lastWord cut to 300 bytes.
func lastLine(path string) string { return cutLine(lastWord(path), 300) }

// lastWord is the last non-empty line of the log's last 4 KiB that is
// not a ResumeHint nor, where another is, a log line: the driver's own
// last word, its error as a rule.
func lastWord(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return ""
	}
	off := max(fi.Size()-4096, 0)
	b := make([]byte, fi.Size()-off)
	n, _ := f.ReadAt(b, off)
	lines := bytes.Split(bytes.TrimRight(b[:n], "\n"), []byte("\n"))
	logged := ""
	for i := len(lines) - 1; i >= 0; i-- {
		l := strings.TrimSpace(string(lines[i]))
		if l == "" || strings.HasPrefix(l, ResumeHint) {
			continue
		}
		if logLine.MatchString(l) {
			if logged == "" {
				logged = l
			}
			continue
		}
		return l
	}
	return logged
}

// cutLine cuts l to n bytes, at a character's start, marking the cut.
func cutLine(l string, n int) string {
	if len(l) <= n {
		return l
	}
	i := n
	for i > 0 && !utf8.RuneStart(l[i]) {
		i--
	}
	return l[:i] + "…"
}

// holderOf matches an actor named in a placement error's list of what
// holds the room ("the room is held by actor NAME ({CPU:2} on N)").
var holderOf = regexp.MustCompile(`actor ([^\s(),;]+) \(`)

// holdersJobs is why with each actor it names as holding the room that a
// job's run owns named with that job ("actor learner-424e9156 of job p1
// (...)"): the actor's name alone, made up by its run, did not say which
// of the cluster's jobs holds the room. An actor's owner is its run's
// driver's node, which carries the job's name as label DriverLabel.
func holdersJobs(why string, recordOf func(name string) (cluster.ActorRecord, bool), views []cluster.NodeView) string {
	i := strings.Index(why, "held by ")
	if i < 0 || recordOf == nil {
		return why
	}
	jobOf := map[string]string{} // driver node id -> job name
	for _, v := range views {
		if name := v.Labels[DriverLabel]; name != "" {
			jobOf[v.ID] = name
		}
	}
	held := holderOf.ReplaceAllStringFunc(why[i:], func(m string) string {
		name := holderOf.FindStringSubmatch(m)[1]
		if rec, ok := recordOf(name); ok && rec.State == cluster.Alive && jobOf[rec.Owner] != "" {
			return "actor " + name + " of job " + jobOf[rec.Owner] + " ("
		}
		return m
	})
	return why[:i] + held
}

// spawnOf matches what a spawn's error begins with: the actor's name,
// which the run made up (learner-2413475f) and says nothing to its user.
var spawnOf = regexp.MustCompile(`spawn [^\s:]+: `)

// pendingWhy is what a job waits for, said from its driver's last line,
// the run's placement error: without "rlnode run: ", the names the run
// made up for its actors, and the words of cluster.ErrNoRoom and what
// trails them (PENDING says as much), with the jobs whose actors hold
// the room (holdersJobs, from recordOf and views), cut to what a note holds
// (with PendingNote before it). Cut first to 300 bytes, the list of what
// holds the room, the part a user acts on, was lost.
func pendingWhy(line string, recordOf func(name string) (cluster.ActorRecord, bool), views []cluster.NodeView) string {
	line = strings.TrimPrefix(line, "rlnode run: ")
	if i := strings.Index(line, ": "+cluster.ErrNoRoom.Error()); i >= 0 {
		line = line[:i]
	}
	line = holdersJobs(spawnOf.ReplaceAllString(line, ""), recordOf, views)
	return cutLine(line, cluster.MaxNoteBytes-len(PendingNote)-len("…"))
}

// Receive answers log reads and stop requests.
func (j *job) Receive(actx *actor.Context, msg any) (any, error) {
	switch m := msg.(type) {
	case logRequest:
		return readLog(filepath.Join(j.spec.Out, LogFile), m.Offset, m.Max)
	case stopRequest:
		j.mu.Lock()
		if !j.stopAsked {
			close(j.stopCh)
		}
		j.stopAsked = true
		j.mu.Unlock()
		sig := syscall.SIGTERM
		if m.Now {
			sig = syscall.SIGKILL
		}
		j.signal(sig)
		return okReply{}, nil
	}
	return nil, fmt.Errorf("job %s: unexpected %T", j.name, msg)
}

// Stopped ends the driver with the actor (its node stops, the job is
// stopped at once, or another node restarts it): SIGTERM, then SIGKILL
// after the stop grace.
func (j *job) Stopped(actx *actor.Context) {
	j.mu.Lock()
	j.stopping = true
	j.mu.Unlock()
	select {
	case <-j.done:
		return
	default:
	}
	_, cfg, _ := hosting()
	grace := cfg.StopGrace
	if grace <= 0 {
		grace = 10 * time.Second
	}
	j.signal(syscall.SIGTERM)
	select {
	case <-j.done:
		return
	case <-time.After(grace):
	}
	j.signal(syscall.SIGKILL)
	select {
	case <-j.done:
	case <-time.After(5 * time.Second):
	}
}

// signal sends sig to the driver's process group: the driver and what it
// started.
func (j *job) signal(sig syscall.Signal) {
	j.mu.Lock()
	p := j.proc
	j.mu.Unlock()
	if p != nil {
		_ = syscall.Kill(-p.Pid, sig)
	}
}

// MaxLogRead bounds one read of a job's log.
const MaxLogRead = 1 << 20

// readLog reads at most max bytes (MaxLogRead at most) of the log at
// path from off.
func readLog(path string, off int64, max int) (logReply, error) {
	if off < 0 {
		return logReply{}, fmt.Errorf("log offset %d: want 0 or more", off)
	}
	if max <= 0 || max > MaxLogRead {
		max = MaxLogRead
	}
	f, err := os.Open(path)
	if err != nil {
		return logReply{}, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return logReply{}, err
	}
	if off > fi.Size() {
		off = fi.Size()
	}
	b := make([]byte, min(int64(max), fi.Size()-off))
	n, err := f.ReadAt(b, off)
	if err != nil && !errors.Is(err, io.EOF) {
		return logReply{}, err
	}
	return logReply{Data: b[:n], Next: off + int64(n), Size: fi.Size()}, nil
}
