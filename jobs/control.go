package jobs

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/rlnode/rlnode/actor"
	"github.com/rlnode/rlnode/cluster"
	"github.com/rlnode/rlnode/internal/ctlsign"
	"github.com/rlnode/rlnode/internal/readfile"
	"github.com/rlnode/rlnode/internal/rundir"
)

// A job's status, from its actor's record.
const (
	Running    = "RUNNING"
	Pending    = "PENDING"    // its run found no room on the cluster; it starts again when room frees
	Restarting = "RESTARTING" // its node was lost or stopped; another node takes it over
	Succeeded  = "SUCCEEDED"
	Failed     = "FAILED"
	Stopped    = "STOPPED"
)

// Info describes one job.
type Info struct {
	Name        string `json:"name"`
	Status      string `json:"status"`
	Node        string `json:"node"` // the node that runs it, or ran it last
	Restarts    int    `json:"restarts"`
	MaxRestarts int    `json:"max_restarts"`
	Cause       string `json:"cause,omitempty"` // how it ended, or why it restarts
	Recipe      string `json:"recipe"`
	Out         string `json:"out"`
	Submitter   string `json:"submitter,omitempty"`
	SubmittedMs int64  `json:"submitted_unix_ms"`
	UpdatedMs   int64  `json:"updated_unix_ms"`
}

// SubmitRequest is the body of POST /jobs.
type SubmitRequest struct {
	// Name is the job's name; empty: the recipe's name and a random suffix.
	Name        string `json:"name,omitempty"`
	Recipe      string `json:"recipe"` // the resolved recipe, YAML
	RecipeName  string `json:"recipe_name"`
	Out         string `json:"out"`
	MaxRestarts int    `json:"max_restarts"`
	// Labels a node must carry to run it; Node pins it to one node.
	Labels    map[string]string `json:"labels,omitempty"`
	Node      string            `json:"node,omitempty"`
	Submitter string            `json:"submitter,omitempty"`
	// Resume continues the run Out holds (rlnode run --continue).
	Resume bool `json:"resume,omitempty"`
	// A recipe the node reads itself, instead of Recipe (from a host
	// without a node, whose paths mean nothing on the cluster): Source is
	// the recipe file's text, SourceName its name as the submitter gave it
	// (errors name it with its lines), or, with no Source, a built-in
	// recipe's name; Sets are --set overrides. Relative paths in it are
	// relative to the node's working folder.
	Source     string   `json:"source,omitempty"`
	SourceName string   `json:"source_name,omitempty"`
	Sets       []string `json:"sets,omitempty"`
	// WorkingDir is the SHA-256 of a package (PUT /packages/{sha256})
	// the node unpacks into the run folder's working_dir before it reads
	// the recipe (Source or SourceName): the recipe's relative paths then
	// resolve in that copy, from SourceDir (the recipe file's folder in
	// it, slash-separated; "" its root), and those of the --set overrides
	// from its root. Out, when given, must be a new or empty folder.
	WorkingDir string `json:"working_dir,omitempty"`
	SourceDir  string `json:"source_dir,omitempty"`
}

// Bounds of what a node takes.
const (
	// MaxJobs bounds the jobs the cluster keeps, running and ended.
	MaxJobs = 1000
	// MaxJobsBytes bounds the spawn arguments (their recipes, mostly) of
	// the jobs the cluster keeps, together: every node's directory holds
	// them and gossips them whole, and memberlist refuses a state over 20
	// MB (no node could join the cluster then). MaxJobs recipes of
	// MaxRecipeBytes would take 48 MiB.
	MaxJobsBytes = 8 << 20
	// MaxRestartsLimit bounds SubmitRequest.MaxRestarts.
	MaxRestartsLimit = 100
	// KeepEnded is how long the cluster keeps an ended job's record.
	KeepEnded = cluster.MaxKeepDead
	// MaxCheckTime is Config.CheckTime's default: how long a node reads
	// and checks a submitted recipe, waiting for its turn included.
	MaxCheckTime = 2 * time.Minute
	// SubmitTime is how long a node may take to answer a submit (the
	// recipe's check, then placing the job): a client waits that long.
	SubmitTime = MaxCheckTime + 2*time.Minute
	// maxBody bounds POST /jobs's body: a recipe of MaxRecipeBytes as
	// JSON escapes it (up to 6 bytes a character: "\u003c" for '<'),
	// with the other fields and the --set overrides.
	maxBody   = 6*MaxRecipeBytes + 64<<10
	maxLabels = 16
	maxSets   = 256
)

// Serve makes node run jobs and adds the job routes to its control
// endpoint (call it before Node.ServeControl):
//
//	POST /jobs                  submit (SubmitRequest) → Info
//	GET  /jobs                  every job the cluster keeps → []Info
//	GET  /jobs/{name}           → Info
//	GET  /jobs/{name}/log       ?offset=N: the log from N (the body);
//	                            Rlnode-Log-Next, Rlnode-Job-Status headers
//	POST /jobs/{name}/stop      ?now=1 kills the driver; else it stops
//	                            after its current step, checkpointed
//	DELETE /jobs/{name}         forgets an ended job (its run folder stays)
//	GET, PUT /packages/{sha256} working dirs (packages.go)
//
// Every route needs the node's token (Node.HandleControl).
func Serve(node *cluster.Node, cfg Config) {
	var store *packageStore
	if cfg.PackagesDir != "" {
		store = &packageStore{dir: cfg.PackagesDir, now: time.Now, uploading: map[string]bool{}}
		// A node killed while it received uploads left them torn; those
		// unused past their TTL go too.
		store.mu.Lock()
		store.sweep()
		store.mu.Unlock()
	}
	host.Lock()
	host.node, host.cfg, host.store = node, cfg, store
	host.Unlock()
	servePackages(node, store)
	node.HandleControl("POST /jobs", http.HandlerFunc(submitHandler))
	node.HandleControl("GET /jobs", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, list(node))
	}))
	node.HandleControl("GET /jobs/{name}", withJob(func(w http.ResponseWriter, _ *http.Request, _ context.Context, _ *cluster.Node, rec cluster.ActorRecord) {
		writeJSON(w, http.StatusOK, info(rec))
	}))
	node.HandleControl("GET /jobs/{name}/log", withJob(logHandler))
	node.HandleControl("POST /jobs/{name}/stop", withJob(stopHandler))
	node.HandleControl("DELETE /jobs/{name}", withJob(deleteHandler))
}

// withJob answers a request about the job its path names with fn, given
// the job's record and a context of 20 s; a job that does not exist, or
// a node that runs no jobs, is answered here.
func withJob(fn func(w http.ResponseWriter, r *http.Request, ctx context.Context, node *cluster.Node, rec cluster.ActorRecord)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		node, _, err := hosting()
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), 20*time.Second)
		defer cancel()
		rec, code, err := record(ctx, node, r.PathValue("name"))
		if err != nil {
			http.Error(w, err.Error(), code)
			return
		}
		fn(w, r, ctx, node, rec)
	})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// info is a job's Info from its record.
func info(rec cluster.ActorRecord) Info {
	in := Info{Name: rec.Name, Node: rec.Node, Restarts: rec.Restarts, MaxRestarts: rec.MaxRestarts, UpdatedMs: rec.UpdatedMs}
	if v, err := actor.DecodeMessage(rec.ArgsType, rec.Args); err == nil {
		if s, ok := v.(Spec); ok {
			in.Recipe, in.Out, in.Submitter, in.SubmittedMs = s.RecipeName, s.Out, s.Submitter, s.SubmittedMs
		}
	}
	in.Status, in.Cause = Describe(rec.State, rec.Cause, rec.Note)
	if in.Status == Failed {
		in.Cause = endCause(rec, in.Out)
	}
	return in
}

// Active says whether a job of this status has not ended: RUNNING,
// PENDING or RESTARTING.
func Active(status string) bool {
	return status == Running || status == Pending || status == Restarting
}

// Describe is the status of a job whose actor is in state, with cause
// and note, and what it says of it: how it ended, why it restarts, or
// what it waits for.
func Describe(state cluster.ActorState, cause, note string) (status, why string) {
	if state != cluster.Alive {
		return StatusOf(state, cause), cause
	}
	if w, ok := strings.CutPrefix(note, PendingNote); ok {
		return Pending, PendingNote + w
	}
	return Running, ""
}

// endCause is the cause a job's record gives, said for its user: the
// cluster's "node stopped" or "node lost" of a job with no restarts
// left names the node, says the restarts are used up and how to
// continue the run.
func endCause(rec cluster.ActorRecord, out string) string {
	if rec.State != cluster.Dead || out == "" {
		return rec.Cause
	}
	var what string
	switch rec.Cause {
	case "node stopped":
		what = "stopped"
	case "node lost":
		what = "was lost"
	default:
		return rec.Cause
	}
	return fmt.Sprintf("node %s %s, and the job had no restarts left (--max-restarts %d): continue its run from its newest checkpoint as a new job with: rlnode submit %s --resume --out %s",
		rec.Node, what, rec.MaxRestarts, filepath.Join(out, RecipeFile), out)
}

// StatusOf is the status of a job whose actor is in state, with cause.
func StatusOf(state cluster.ActorState, cause string) string {
	switch state {
	case cluster.Alive:
		return Running
	case cluster.Restarting:
		return Restarting
	}
	return statusOfEnd(cause)
}

// statusOfEnd is the status of a job whose actor ended with cause.
func statusOfEnd(cause string) string {
	switch {
	case strings.HasPrefix(cause, "job succeeded"):
		return Succeeded
	case strings.HasPrefix(cause, "job stopped"), cause == "stopped":
		return Stopped
	}
	return Failed // it failed, or its node was lost with no restarts left
}

// records are the cluster's job records, by name.
func records(node *cluster.Node) []cluster.ActorRecord {
	var out []cluster.ActorRecord
	for _, a := range node.Status().Actors {
		if a.Kind != Kind {
			continue
		}
		if rec, ok := node.Record(a.Name); ok {
			out = append(out, rec)
		}
	}
	sort.Slice(out, func(i, k int) bool { return out[i].Name < out[k].Name })
	return out
}

// list is every job the cluster keeps, in the order they were submitted.
func list(node *cluster.Node) []Info {
	out := []Info{}
	for _, rec := range records(node) {
		out = append(out, info(rec))
	}
	sort.SliceStable(out, func(i, k int) bool { return out[i].SubmittedMs < out[k].SubmittedMs })
	return out
}

func record(ctx context.Context, node *cluster.Node, name string) (cluster.ActorRecord, int, error) {
	if err := CheckName(name); err != nil {
		return cluster.ActorRecord{}, http.StatusBadRequest, err
	}
	rec, ok := node.Record(name)
	if !ok {
		// Gossip may not have brought a new job's record yet: its node says.
		h, err := node.Lookup(ctx, name)
		if err != nil {
			return cluster.ActorRecord{}, http.StatusNotFound, fmt.Errorf("job %s: no such job (rlnode job list shows them)", name)
		}
		rec, ok = h.Record()
	}
	if !ok || rec.Kind != Kind {
		return cluster.ActorRecord{}, http.StatusNotFound, fmt.Errorf("job %s: no such job (an actor of kind %s has that name)", name, rec.Kind)
	}
	return rec, http.StatusOK, nil
}

func submitHandler(w http.ResponseWriter, r *http.Request) {
	node, cfg, err := hosting()
	if err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	var req SubmitRequest
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	if err == nil && len(body) > maxBody {
		err = fmt.Errorf("over %d bytes (a job's recipe may hold %d)", maxBody, MaxRecipeBytes)
	}
	if err == nil {
		err = json.Unmarshal(body, &req)
	}
	if err != nil {
		http.Error(w, "request body: "+err.Error(), http.StatusBadRequest)
		return
	}
	// The recipe's check may take minutes (it reads the datasets the
	// recipe names): the answer must not be cut off by the endpoint's
	// read and write timeouts, made for quick routes (the body is read
	// within them). The client going away still ends the request's
	// context.
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Now().Add(SubmitTime))
	_ = rc.SetWriteDeadline(time.Now().Add(SubmitTime))
	// A signed request's default name comes from what it was signed
	// with: a copy of it replayed to another node of the cluster names
	// the same job there, and is refused as one that exists.
	at, nonce := time.Now(), ""
	if t, n, ok := cluster.SignedRequest(r); ok {
		at, nonce = t, n[:4]
	}
	// The client names the command already (rlnode submit: node N: …).
	info, code, err := submit(r.Context(), node, cfg, req, at, nonce)
	if err != nil {
		http.Error(w, err.Error(), code)
		return
	}
	writeJSON(w, http.StatusCreated, info)
}

// submit checks req and spawns its job actor. A request without a run
// folder (from a host without a node: its paths mean nothing here) gets
// cfg.RunsDir/RECIPE-DATE[-N], made here. A job without a name gets
// RECIPE-DATE-SUFFIX, DATE from at and SUFFIX that of the request (4 hex
// digits; "": random).
func submit(ctx context.Context, node *cluster.Node, cfg Config, req SubmitRequest, at time.Time, suffix string) (Info, int, error) {
	checked := false
	var made *madeRunDir
	if req.WorkingDir != "" {
		var code int
		var err error
		if made, code, err = unpackWorkingDir(ctx, node, cfg, req); err != nil {
			return Info{}, code, err
		}
		defer func() { made.undo() }()
		req.Out = made.out
	}
	if req.SourceName != "" || req.Source != "" {
		switch {
		case req.Recipe != "":
			return Info{}, http.StatusBadRequest, errors.New("both recipe and source: want one")
		case req.SourceName == "" || len(req.SourceName) > 4096:
			return Info{}, http.StatusBadRequest, errors.New("source_name: want the recipe's file name (at most 4096 bytes)")
		case len(req.Source) > MaxRecipeBytes:
			return Info{}, http.StatusBadRequest, fmt.Errorf("recipe %s: %d bytes, over the %d a job's recipe may hold (it travels in the job's record)", req.SourceName, len(req.Source), MaxRecipeBytes)
		case len(req.Sets) > maxSets:
			return Info{}, http.StatusBadRequest, fmt.Errorf("%d --set overrides: want at most %d", len(req.Sets), maxSets)
		case cfg.Resolve == nil:
			return Info{}, http.StatusBadRequest, fmt.Errorf("node %s reads no recipes (it is no rlnode start or join node)", node.ID())
		}
		src := []byte(req.Source)
		if req.Source == "" && IsRunRecipe(req.SourceName, req.Out, req.Resume) {
			// rlnode submit OUT/[job-]recipe.yaml --resume --out OUT from a host
			// that may not see OUT: the run's own recipe, read here.
			// A regular file (a pipe would block the read), at most
			// MaxRecipeBytes.
			b, err := readfile.Regular(req.SourceName, MaxRecipeBytes)
			if err != nil {
				return Info{}, http.StatusBadRequest, fmt.Errorf("the run's recipe, as node %s reads it: %w", node.ID(), err)
			}
			src = b
		}
		var resolved []byte
		var name string
		dir, setsDir := "", ""
		if made != nil {
			setsDir = made.workingDir
			dir = filepath.Join(setsDir, filepath.FromSlash(req.SourceDir))
		}
		code, err := checkBounded(ctx, node, cfg.CheckTime, func() (err error) {
			resolved, name, err = cfg.Resolve(req.SourceName, src, dir, setsDir, req.Sets)
			return err
		})
		if code == http.StatusBadRequest {
			return Info{}, code, fmt.Errorf("the recipe, as node %s reads it:\n%w", node.ID(), err)
		} else if err != nil {
			return Info{}, code, err
		}
		req.Recipe, req.RecipeName, checked = string(resolved), name, true
	}
	spec := Spec{Recipe: []byte(req.Recipe), RecipeName: req.RecipeName, Out: filepath.Clean(req.Out), SubmittedMs: time.Now().UnixMilli(), Submitter: req.Submitter, Resume: req.Resume}
	defaultOut := ""
	if req.Out == "" {
		spec.Out = ""
		if cfg.RunsDir != "" && !req.Resume {
			base := req.RecipeName
			if CheckName(base) != nil {
				base = "job"
			}
			defaultOut = filepath.Join(cfg.RunsDir, base+"-"+time.Now().Format("20060102-150405"))
			spec.Out = defaultOut
		}
	}
	if err := spec.Check(); err != nil {
		return Info{}, http.StatusBadRequest, err
	}
	if cfg.Check != nil && !checked {
		code, err := checkBounded(ctx, node, cfg.CheckTime, func() error { return cfg.Check(spec.Recipe) })
		if code == http.StatusBadRequest {
			return Info{}, code, fmt.Errorf("the recipe, checked on node %s (every file it names must be there, at the path it gives): %w", node.ID(), err)
		} else if err != nil {
			return Info{}, code, err
		}
	}
	if err := ctx.Err(); err != nil {
		// The submitter went away while its recipe was checked: it was
		// told nothing was taken, or will be.
		return Info{}, http.StatusServiceUnavailable, fmt.Errorf("not submitted: the request ended while its recipe was checked (%v)", err)
	}
	if req.MaxRestarts < 0 || req.MaxRestarts > MaxRestartsLimit {
		return Info{}, http.StatusBadRequest, fmt.Errorf("max_restarts %d: want 0 to %d", req.MaxRestarts, MaxRestartsLimit)
	}
	if len(req.Labels) > maxLabels {
		return Info{}, http.StatusBadRequest, fmt.Errorf("%d labels: want at most %d", len(req.Labels), maxLabels)
	}
	if len(req.Submitter) > 256 || len(req.RecipeName) > 256 {
		return Info{}, http.StatusBadRequest, errors.New("submitter or recipe_name over 256 bytes")
	}
	name := req.Name
	if name == "" {
		base := req.RecipeName
		if CheckName(base) != nil {
			base = "job"
		}
		if suffix == "" {
			var b [2]byte
			_, _ = rand.Read(b[:])
			suffix = fmt.Sprintf("%x", b)
		}
		name = fmt.Sprintf("%s-%s-%s", base, at.UTC().Format("20060102-150405"), suffix)
	}
	if err := CheckName(name); err != nil {
		return Info{}, http.StatusBadRequest, err
	}
	known := records(node)
	if len(known) >= MaxJobs {
		return Info{}, http.StatusTooManyRequests, fmt.Errorf("the cluster keeps %d jobs, its bound: an ended job is forgotten %v after it ends", len(known), KeepEnded)
	}
	_, args, err := actor.EncodeMessage(spec)
	if err != nil {
		return Info{}, http.StatusBadRequest, err
	}
	spawned := false
	held := 0
	for _, rec := range known {
		held += len(rec.Args)
	}
	if held+len(args) > MaxJobsBytes {
		return Info{}, http.StatusTooManyRequests, fmt.Errorf("the cluster keeps %d jobs whose records take %.1f MiB, and this one's %.1f KiB would pass their %d MiB bound (every node's directory holds them): an ended job is forgotten %v after it ends, or submit a smaller recipe",
			len(known), float64(held)/(1<<20), float64(len(args))/(1<<10), MaxJobsBytes>>20, KeepEnded)
	}
	for _, rec := range known {
		in := info(rec)
		if rec.Name == name {
			if Active(in.Status) {
				return Info{}, http.StatusConflict, fmt.Errorf("job %s exists (%s): choose another name", name, in.Status)
			}
			// An ended one is kept for days: say how to reuse its name now.
			return Info{}, http.StatusConflict, fmt.Errorf("job %s exists (%s): choose another name, or forget it first with rlnode job delete %s", name, in.Status, name)
		}
		if Active(in.Status) && in.Out == spec.Out {
			return Info{}, http.StatusConflict, fmt.Errorf("job %s (%s) runs into %s already", rec.Name, in.Status, spec.Out)
		}
	}
	labels := map[string]string{Label: "yes"}
	for k, v := range req.Labels {
		labels[k] = v
	}
	if defaultOut != "" {
		dir, err := rundir.Reserve(defaultOut)
		if err != nil {
			return Info{}, http.StatusInternalServerError, fmt.Errorf("run folder under %s (node %s): %w", cfg.RunsDir, node.ID(), err)
		}
		spec.Out = dir
		defer func() {
			if !spawned {
				_ = os.Remove(dir) // only while still empty
			}
		}()
	}
	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	h, err := node.Spawn(sctx, Kind, cluster.SpawnOptions{
		Name: name, Args: spec, Resources: cluster.Resources{}, Labels: labels, Node: req.Node,
		MaxRestarts: req.MaxRestarts, Detached: true, KeepDead: KeepEnded,
	})
	spawned = err == nil
	if spawned {
		made.keep()
	}
	if err != nil {
		code := http.StatusInternalServerError
		if errors.Is(err, cluster.ErrInfeasible) || errors.Is(err, actor.ErrNameTaken) {
			code = http.StatusConflict // a submit of the same name beside this one won
		}
		return Info{}, code, err
	}
	rec, _ := h.Record()
	return info(rec), http.StatusCreated, nil
}

// RunRecipeFile is the resolved recipe a run writes in its folder
// (recipes.ResolvedFile).
const RunRecipeFile = "recipe.yaml"

// IsRunRecipe says whether a submit of the recipe file name, resuming
// (or not) the run in out, resumes it with that run's own recipe (its
// recipe.yaml, or the job's job-recipe.yaml): a node reads that file
// itself when no text comes with it, since the run's folder is on the
// cluster's filesystem, which the submitting host may not see.
func IsRunRecipe(name, out string, resume bool) bool {
	if !resume || !filepath.IsAbs(out) {
		return false
	}
	name = filepath.Clean(name)
	return name == filepath.Join(filepath.Clean(out), RunRecipeFile) || name == filepath.Join(filepath.Clean(out), RecipeFile)
}

// checking holds the turn of the one recipe check a node runs at a time.
var checking = make(chan struct{}, 1)

// checkBounded runs check, a submitted recipe's (it reads what the recipe
// names: datasets up to a GiB, models, traces), in its turn, one at a
// time on this node, and within limit (0: MaxCheckTime), waiting
// included. Past the limit, or when ctx ends, the submit is refused
// (503) and the check's result, whenever it comes, is dropped. The code
// is 400 when check refused the recipe, 0 when it passed.
func checkBounded(ctx context.Context, node *cluster.Node, limit time.Duration, check func() error) (int, error) {
	if limit <= 0 {
		limit = MaxCheckTime
	}
	timer := time.NewTimer(limit)
	defer timer.Stop()
	select {
	case checking <- struct{}{}:
	case <-timer.C:
		return http.StatusServiceUnavailable, fmt.Errorf("node %s is checking another submitted recipe, and this one's turn did not come within %v: not submitted; try again", node.ID(), limit)
	case <-ctx.Done():
		return http.StatusServiceUnavailable, fmt.Errorf("not submitted: the request ended while waiting for its recipe's check (%v)", ctx.Err())
	}
	done := make(chan error, 1)
	go func() {
		defer func() {
			if p := recover(); p != nil {
				done <- fmt.Errorf("checking the recipe on node %s failed: %v", node.ID(), p)
			}
			<-checking
		}()
		done <- check()
	}()
	select {
	case err := <-done:
		if err != nil {
			return http.StatusBadRequest, err
		}
		return 0, nil
	case <-timer.C:
		return http.StatusServiceUnavailable, fmt.Errorf("checking the recipe on node %s took over %v (it reads every dataset and file the recipe names, on the node's host): not submitted", node.ID(), limit)
	case <-ctx.Done():
		return http.StatusServiceUnavailable, fmt.Errorf("not submitted: the request ended while its recipe was checked (%v)", ctx.Err())
	}
}

type logTask struct {
	Name   string
	Offset int64
}

// logTaskName reads an ended job's log on the node that ran it last.
const logTaskName = "rlnode.job.log"

func init() {
	cluster.RegisterTask(logTaskName, func(ctx context.Context, t logTask) (logReply, error) {
		node, _, err := hosting()
		if err != nil {
			return logReply{}, err
		}
		rec, _, err := record(ctx, node, t.Name)
		if err != nil {
			return logReply{}, err
		}
		out := info(rec).Out
		if out == "" {
			return logReply{}, fmt.Errorf("job %s: its record names no run folder", t.Name)
		}
		return readLog(filepath.Join(out, LogFile), t.Offset, MaxLogRead)
	})
}

func logHandler(w http.ResponseWriter, r *http.Request, ctx context.Context, node *cluster.Node, rec cluster.ActorRecord) {
	off, err := strconv.ParseInt(r.URL.Query().Get("offset"), 10, 64)
	if r.URL.Query().Get("offset") == "" {
		off, err = 0, nil
	}
	if err != nil || off < 0 {
		http.Error(w, fmt.Sprintf("log: offset %q: want a byte offset, 0 or more", r.URL.Query().Get("offset")), http.StatusBadRequest)
		return
	}
	in := info(rec)
	var rep logReply
	switch {
	case rec.State == cluster.Alive:
		var h *cluster.Handle
		if h, err = node.Lookup(ctx, rec.Name); err == nil {
			rep, err = cluster.Call[logReply](ctx, h, logRequest{Offset: off, Max: MaxLogRead})
		}
	case rec.Node != "":
		// Ended: the node that ran it last reads it.
		rep, err = cluster.Submit[logReply](ctx, node, logTaskName, logTask{Name: rec.Name, Offset: off},
			cluster.TaskOptions{Node: rec.Node, Resources: cluster.Resources{}}).Get(ctx)
	default:
		err = errors.New("it is between nodes")
	}
	if err != nil {
		// The folder may be shared: this node reads it then.
		if local, lerr := readLog(filepath.Join(in.Out, LogFile), off, MaxLogRead); lerr == nil {
			rep, err = local, nil
		}
	}
	if err != nil {
		http.Error(w, fmt.Sprintf("job %s (%s): its log %s on node %s cannot be read from here: %v", rec.Name, in.Status, filepath.Join(in.Out, LogFile), dash(rec.Node), err), http.StatusBadGateway)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Rlnode-Log-Next", strconv.FormatInt(rep.Next, 10))
	w.Header().Set("Rlnode-Log-Size", strconv.FormatInt(rep.Size, 10))
	w.Header().Set("Rlnode-Job-Status", in.Status)
	_, _ = w.Write(rep.Data)
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func stopHandler(w http.ResponseWriter, r *http.Request, ctx context.Context, node *cluster.Node, rec cluster.ActorRecord) {
	now := r.URL.Query().Get("now") == "1"
	in := info(rec)
	if rec.State != cluster.Alive {
		why := "it has ended"
		if rec.State == cluster.Restarting {
			why = "it is being restarted on another node; stop it once it is RUNNING"
		}
		http.Error(w, fmt.Sprintf("job %s is %s: %s", rec.Name, in.Status, why), http.StatusConflict)
		return
	}
	h, err := node.Lookup(ctx, rec.Name)
	if err == nil {
		_, err = cluster.Call[okReply](ctx, h, stopRequest{Now: now})
	}
	if errors.Is(err, actor.ErrActorDied) {
		// A PENDING job ends at once when asked to stop, and its death
		// may reach this node before the reply: the stop took.
		if after, ok := node.Record(rec.Name); ok && strings.HasPrefix(after.Cause, "job stopped") {
			writeJSON(w, http.StatusAccepted, info(after))
			return
		}
	}
	if err != nil {
		http.Error(w, fmt.Sprintf("job %s: stop: %v", rec.Name, err), http.StatusBadGateway)
		return
	}
	writeJSON(w, http.StatusAccepted, in)
}

// deleteHandler forgets an ended job: its record goes from every list at
// once (and from the cluster's bounds: MaxJobs, MaxJobsBytes); its run
// folder, log included, stays where it is.
func deleteHandler(w http.ResponseWriter, _ *http.Request, _ context.Context, node *cluster.Node, rec cluster.ActorRecord) {
	in := info(rec)
	if Active(in.Status) {
		http.Error(w, fmt.Sprintf("job %s is %s: stop it first (rlnode job stop %s), then delete it", rec.Name, in.Status, rec.Name), http.StatusConflict)
		return
	}
	if err := node.Forget(rec.Name); err != nil {
		http.Error(w, fmt.Sprintf("job %s: delete: %v", rec.Name, err), http.StatusConflict)
		return
	}
	writeJSON(w, http.StatusOK, in)
}

// Client talks to one node's job routes.
type Client struct {
	Control string // the node's control endpoint, HOST:PORT
	// Token is the node's control token (a client on the node's host);
	// with Key instead, requests are signed with the cluster key
	// (internal/ctlsign), which any host that holds it can do.
	Token string
	Key   []byte
	HTTP  *http.Client // default: http.DefaultClient
}

func (c Client) do(ctx context.Context, method, path string, body []byte) (*http.Response, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://"+c.Control+path, rd)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(body)
	c.authorize(req, hex.EncodeToString(sum[:]))
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	start := time.Now()
	resp, err := c.client().Do(req)
	if err != nil {
		return nil, cluster.NoAnswer(err, start)
	}
	if resp.StatusCode/100 != 2 {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		resp.Body.Close()
		return nil, &HTTPError{Code: resp.StatusCode, Msg: strings.TrimSpace(string(msg))}
	}
	return resp, nil
}

// authorize signs req, whose body hashes to bodySHA256 (hex), with the
// cluster key, or gives it the node's token.
func (c Client) authorize(req *http.Request, bodySHA256 string) {
	if c.Key != nil {
		ctlsign.SignHash(req, c.Key, bodySHA256, time.Now())
	} else {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
}

func (c Client) client() *http.Client {
	if c.HTTP == nil {
		return http.DefaultClient
	}
	return c.HTTP
}

// HTTPError is a node's refusal.
type HTTPError struct {
	Code int
	Msg  string
}

func (e *HTTPError) Error() string { return e.Msg }

func (c Client) getJSON(ctx context.Context, method, path string, body []byte, v any) error {
	resp, err := c.do(ctx, method, path, body)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return json.NewDecoder(io.LimitReader(resp.Body, 64<<20)).Decode(v)
}

// Submit submits a job.
func (c Client) Submit(ctx context.Context, req SubmitRequest) (Info, error) {
	b, err := json.Marshal(req)
	if err != nil {
		return Info{}, err
	}
	var in Info
	err = c.getJSON(ctx, http.MethodPost, "/jobs", b, &in)
	return in, err
}

// List lists the jobs the cluster keeps.
func (c Client) List(ctx context.Context) ([]Info, error) {
	var out []Info
	err := c.getJSON(ctx, http.MethodGet, "/jobs", nil, &out)
	return out, err
}

// Get describes one job.
func (c Client) Get(ctx context.Context, name string) (Info, error) {
	var in Info
	err := c.getJSON(ctx, http.MethodGet, "/jobs/"+url.PathEscape(name), nil, &in)
	return in, err
}

// Log reads the job's log from offset: the bytes, the offset after them
// and the job's status.
func (c Client) Log(ctx context.Context, name string, offset int64) ([]byte, int64, string, error) {
	p, err := c.LogPart(ctx, name, offset)
	return p.Data, p.Next, p.Status, err
}

// LogPart is one read of a job's log: at most MaxLogRead bytes from an
// offset, the offset after them, the log's size when read and the job's
// status.
type LogPart struct {
	Data       []byte
	Next, Size int64
	Status     string
}

// LogPart reads the job's log from offset.
func (c Client) LogPart(ctx context.Context, name string, offset int64) (LogPart, error) {
	p := LogPart{Next: offset}
	resp, err := c.do(ctx, http.MethodGet, "/jobs/"+url.PathEscape(name)+"/log?offset="+strconv.FormatInt(offset, 10), nil)
	if err != nil {
		return p, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, MaxLogRead+1))
	if err != nil {
		return p, err
	}
	next, perr := strconv.ParseInt(resp.Header.Get("Rlnode-Log-Next"), 10, 64)
	if perr != nil || next != offset+int64(len(b)) {
		return p, fmt.Errorf("log of job %s: the node answered %d bytes from %d with next offset %q", name, len(b), offset, resp.Header.Get("Rlnode-Log-Next"))
	}
	size, _ := strconv.ParseInt(resp.Header.Get("Rlnode-Log-Size"), 10, 64)
	return LogPart{Data: b, Next: next, Size: max(size, next), Status: resp.Header.Get("Rlnode-Job-Status")}, nil
}

// Delete forgets an ended job; it returns what the job was.
func (c Client) Delete(ctx context.Context, name string) (Info, error) {
	var in Info
	err := c.getJSON(ctx, http.MethodDelete, "/jobs/"+url.PathEscape(name), nil, &in)
	return in, err
}

// Stop asks the job to stop: after its current step, which its driver
// checkpoints, or at once (now).
func (c Client) Stop(ctx context.Context, name string, now bool) error {
	path := "/jobs/" + url.PathEscape(name) + "/stop"
	if now {
		path += "?now=1"
	}
	resp, err := c.do(ctx, http.MethodPost, path, nil)
	if err != nil {
		return err
	}
	resp.Body.Close()
	return nil
}
