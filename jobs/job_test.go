package jobs

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/rlnode/rlnode/actor"
	"github.com/rlnode/rlnode/cluster"
	"github.com/rlnode/rlnode/internal/runlock"
)

func TestSpecAndNameChecks(t *testing.T) {
	ok := Spec{Recipe: []byte("name: x\n"), Out: "/runs/x"}
	for _, c := range []struct {
		spec Spec
		says string
	}{
		{ok, ""},
		{Spec{Out: "/runs/x"}, "no recipe"},
		{Spec{Recipe: make([]byte, MaxRecipeBytes+1), Out: "/runs/x"}, "over the"},
		{Spec{Recipe: ok.Recipe, Out: "runs/x"}, "want an absolute path"},
		{Spec{Recipe: ok.Recipe}, "want an absolute path"},
		{Spec{Recipe: ok.Recipe, Out: "/runs/x\n--resume"}, "NUL or newline"},
	} {
		err := c.spec.Check()
		if (c.says == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), c.says)) {
			t.Errorf("Check(%q): %v, want %q", c.spec.Out, err, c.says)
		}
	}
	for name, good := range map[string]bool{
		"quickstart-20261127-104352-74f9": true, "a": true, "A.b_c-9": true,
		"": false, "-x": false, ".hidden": false, "../etc": false, "a/b": false, "a b": false, strings.Repeat("x", 65): false,
	} {
		if err := CheckName(name); (err == nil) != good {
			t.Errorf("CheckName(%q) = %v", name, err)
		}
	}
}

func TestStatusOfEnd(t *testing.T) {
	for cause, want := range map[string]string{
		"job succeeded": Succeeded,
		"job stopped: its run was asked to stop and exited (exit status 1)": Stopped,
		"stopped": Stopped,
		"job failed: rlnode run exit status 1: boom": Failed,
		"node lost": Failed,
		"node lost; restart failed: spawn x: infeasible placement": Failed,
	} {
		if got := statusOfEnd(cause); got != want {
			t.Errorf("statusOfEnd(%q) = %s, want %s", cause, got, want)
		}
	}
}

func TestDriverArgs(t *testing.T) {
	spec := Spec{Out: "/runs/x"}
	base := []string{"run", "/runs/x/job-recipe.yaml", "--out", "/runs/x", "--address", "10.0.0.2:7946", "--driver-only", "--key-file", "/k", "--bind", "10.0.0.2:0"}
	if got := driverArgs(spec, "/runs/x/job-recipe.yaml", "10.0.0.2:7946", "/k", 0); !reflect.DeepEqual(got, base) {
		t.Errorf("first attempt: %q", got)
	}
	if got := driverArgs(spec, "/runs/x/job-recipe.yaml", "10.0.0.2:7946", "/k", 2); !reflect.DeepEqual(got, append(base[:len(base):len(base)], "--continue")) {
		t.Errorf("attempt taken over: %q", got)
	}
	spec.Resume = true
	if got := driverArgs(spec, "/runs/x/job-recipe.yaml", "10.0.0.2:7946", "/k", 0); !reflect.DeepEqual(got, append(base[:len(base):len(base)], "--continue")) {
		t.Errorf("submitted with --resume: %q", got)
	}
	v6 := driverArgs(Spec{Out: "/r"}, "/r/j", "[fd00::2]:7946", "", 0)
	if want := []string{"run", "/r/j", "--out", "/r", "--address", "[fd00::2]:7946", "--driver-only", "--bind", "[fd00::2]:0"}; !reflect.DeepEqual(v6, want) {
		t.Errorf("IPv6, no key file: %q", v6)
	}
}

func TestReadLogBounds(t *testing.T) {
	path := filepath.Join(t.TempDir(), LogFile)
	if err := os.WriteFile(path, []byte("0123456789"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		off        int64
		max        int
		data       string
		next, size int64
	}{
		{0, 0, "0123456789", 10, 10},
		{3, 4, "3456", 7, 10},
		{8, 100, "89", 10, 10},
		{10, 5, "", 10, 10},
		{99, 5, "", 10, 10}, // past the end: nothing, at the end
	} {
		rep, err := readLog(path, c.off, c.max)
		if err != nil || string(rep.Data) != c.data || rep.Next != c.next || rep.Size != c.size {
			t.Errorf("readLog(%d, %d) = %q %d %d, %v", c.off, c.max, rep.Data, rep.Next, rep.Size, err)
		}
	}
	if _, err := readLog(path, -1, 5); err == nil {
		t.Error("a negative offset was read")
	}
	if _, err := readLog(filepath.Join(t.TempDir(), "none"), 0, 5); err == nil {
		t.Error("a missing log was read")
	}
}

// A job taken over waits while another process holds the run's lock (a
// driver beyond a partition), says so in its log, and goes on once the
// lock is released; a stop asked meanwhile ends the wait.
func TestWaitForRunLock(t *testing.T) {
	dir := t.TempDir()
	unlock, err := runlock.Lock(dir)
	if err != nil {
		t.Fatal(err)
	}
	if holder, held := runlock.Held(dir); !held || !strings.Contains(holder, fmt.Sprintf("pid %d", os.Getpid())) {
		t.Fatalf("Held = %q, %v while locked", holder, held)
	}
	var log bytes.Buffer
	released := make(chan struct{})
	go func(unlock func()) {
		time.Sleep(1500 * time.Millisecond)
		close(released)
		unlock()
	}(unlock)
	waitForRunLock(context.Background(), dir, "j", &log, func() bool { return false })
	select {
	case <-released:
	default:
		t.Fatal("the wait ended while the lock was held")
	}
	if !strings.Contains(log.String(), "rlnode job j: waiting for the run lock of "+dir+", held by pid ") {
		t.Errorf("log: %q", log.String())
	}
	if _, held := runlock.Held(dir); held {
		t.Error("Held after the unlock")
	}

	// A stop asked ends the wait.
	<-released
	unlock2, err := runlock.Lock(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer unlock2()
	done := make(chan struct{})
	go func() {
		waitForRunLock(context.Background(), dir, "j", io.Discard, func() bool { return true })
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("a stop asked did not end the wait")
	}
}

// A failed job's cause is the driver's error, not the hint that a run
// which wrote a checkpoint prints after it (the cause said only "once
// the cause is fixed, continue from checkpoint step-53 with: ...").
func TestLastLineIsTheError(t *testing.T) {
	path := filepath.Join(t.TempDir(), LogFile)
	log := "step 53/302 (RL 51/300) reward 0.000\n" +
		"checkpoints: /runs/x/checkpoints (newest step-53)\n" +
		"rlnode run: solver policy: rollout actors: no node can host {CPU:1}\n" +
		ResumeHint + "step-53 with: rlnode run /runs/x/recipe.yaml --out /runs/x --resume\n\n"
	if err := os.WriteFile(path, []byte(log), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, want := lastLine(path), "rlnode run: solver policy: rollout actors: no node can host {CPU:1}"; got != want {
		t.Errorf("lastLine = %q, want %q", got, want)
	}
	// The driver's log lines after its error (its gossip seeing other
	// drivers leave as it stops) are no cause: a job's FAILED cause and
	// PENDING note said `level=WARN msg="node lost" ...`.
	log = "rlnode run: place the solver learner: spawn learner-1: no node can host {CPU:1}\n" +
		"rlnode run: level=WARN msg=\"node lost\" node=vm-fe4fae member=vm-1a23b7 gossip=127.0.0.1:38479\n" +
		"time=2026-11-27T14:18:25.000Z level=INFO msg=\"node stopped\"\n"
	if err := os.WriteFile(path, []byte(log), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, want := lastLine(path), "rlnode run: place the solver learner: spawn learner-1: no node can host {CPU:1}"; got != want {
		t.Errorf("lastLine past log lines = %q, want %q", got, want)
	}
	// A log of log lines alone gives its last.
	log = "rlnode run: level=INFO msg=\"starting the learner\"\nrlnode run: level=WARN msg=\"node lost\"\n"
	if err := os.WriteFile(path, []byte(log), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, want := lastLine(path), `rlnode run: level=WARN msg="node lost"`; got != want {
		t.Errorf("lastLine of log lines alone = %q, want %q", got, want)
	}
	// A long line is cut at a character's start: the cut-off half of
	// one was an invalid byte in the job's cause and its JSON.
	long := "rlnode run: x" + strings.Repeat("é", 200)
	if err := os.WriteFile(path, []byte(long+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := lastLine(path); !utf8.ValidString(got) || !strings.HasSuffix(got, "…") || len(got) > 300+len("…") {
		t.Errorf("lastLine of a long line = %q (%d bytes), want it cut within 300 bytes at a character's start, with …", got, len(got))
	}
}

// What a PENDING job waits for is its driver's placement error said for
// its user: it read "waiting for room: place the solver learner: spawn
// learner-2413475f: no node can host …", cut at 300 bytes inside the
// list of what holds the room (the part a user acts on), with the run's
// made-up actor names and ErrNoRoom's words, which PENDING says already.
func TestPendingWhy(t *testing.T) {
	held := "the room is held by actor learner-65a22525 ({CPU:2 memory:7.5 MiB} on vm-9a8637), actor learner-e9cc05a4 ({CPU:2 memory:7.5 MiB} on vm-1569dd)"
	cases := []struct{ name, line, want string }{
		{"a learner, seen from a driver",
			"rlnode run: place the solver learner: spawn learner-2413475f: no node can host {CPU:2 memory:7.5 MiB}; free/total per node: vm-58a95f CPU 1/2, memory 23.5 GiB/23.5 GiB; vm-1569dd CPU 0/2, memory 23.5 GiB/23.5 GiB; vm-9a8637 CPU 0/2, memory 23.5 GiB/23.5 GiB; without CPU or memory: vm-05bab8, vm-0b98f7; " + held + ": " + cluster.ErrNoRoom.Error() + " (after: node x: lacks CPU)",
			"place the solver learner: no node can host {CPU:2 memory:7.5 MiB}; free/total per node: vm-58a95f CPU 1/2, memory 23.5 GiB/23.5 GiB; vm-1569dd CPU 0/2, memory 23.5 GiB/23.5 GiB; vm-9a8637 CPU 0/2, memory 23.5 GiB/23.5 GiB; without CPU or memory: vm-05bab8, vm-0b98f7; " + held},
		{"rollout actors",
			"rlnode run: rollout actors: start one on any node: spawn rollout-solver-17958-0: no node can host {CPU:1}; free/total per node: a CPU 0/1: " + cluster.ErrNoRoom.Error(),
			"rollout actors: start one on any node: no node can host {CPU:1}; free/total per node: a CPU 0/1"},
		{"a line of other words stays", "rlnode run: the spawn of nothing: x", "the spawn of nothing: x"},
	}
	for _, c := range cases {
		if got := pendingWhy(c.line, nil, nil); got != c.want {
			t.Errorf("%s:\n got %q\nwant %q", c.name, got, c.want)
		}
	}
	// The actors that hold the room are named with their jobs: the
	// learner's owner is job p1's driver node (label DriverLabel).
	views := []cluster.NodeView{{ID: "drv-p1", Labels: map[string]string{DriverLabel: "p1"}}, {ID: "vm-9a8637", Labels: map[string]string{Label: "yes"}}}
	recs := map[string]cluster.ActorRecord{
		"learner-65a22525": {Name: "learner-65a22525", Owner: "drv-p1", State: cluster.Alive},
		"learner-e9cc05a4": {Name: "learner-e9cc05a4", Owner: "someone", State: cluster.Alive},
	}
	recordOf := func(name string) (cluster.ActorRecord, bool) { r, ok := recs[name]; return r, ok }
	want := "place the solver learner: no node can host {CPU:2}; free/total per node: vm-9a8637 CPU 0/2; the room is held by actor learner-65a22525 of job p1 ({CPU:2 memory:7.5 MiB} on vm-9a8637), actor learner-e9cc05a4 ({CPU:2 memory:7.5 MiB} on vm-1569dd)"
	line := "rlnode run: place the solver learner: spawn learner-2413475f: no node can host {CPU:2}; free/total per node: vm-9a8637 CPU 0/2; " + held + ": " + cluster.ErrNoRoom.Error()
	if got := pendingWhy(line, recordOf, views); got != want {
		t.Errorf("with the holders' jobs:\n got %q\nwant %q", got, want)
	}
	long := pendingWhy("rlnode run: "+strings.Repeat("é", 400), nil, nil)
	if note := PendingNote + long; len(note) > cluster.MaxNoteBytes || !utf8.ValidString(note) || !strings.HasSuffix(note, "…") {
		t.Errorf("a long reason's note is %d bytes (at most %d), valid %v: %q", len(note), cluster.MaxNoteBytes, utf8.ValidString(note), note)
	}
}

// The jobs the cluster keeps (7 days once ended) hold their recipes in
// the directory every node gossips whole: past memberlist's 20 MB state
// no node could join ("remote node state is larger than limit", seen
// after 460 jobs of 48 KiB recipes). A submit past MaxJobsBytes is
// refused, naming the bound, and the records stay within it.
func TestJobRecordsStayWithinTheirBound(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// Each job's "driver" exits at once: only the records matter here.
	node := serveJobs(t, cluster.Config{}, Config{Executable: "/bin/true"})
	recipe := "name: big\n# " + strings.Repeat("x", MaxRecipeBytes-16) + "\n"
	dir := t.TempDir()
	var refused error
	for i := 0; i < MaxJobs && refused == nil; i++ {
		_, code, err := submit(ctx, node, Config{}, SubmitRequest{Name: fmt.Sprintf("big%d", i), Recipe: recipe, RecipeName: "big", Out: filepath.Join(dir, fmt.Sprint(i))}, time.Now(), "")
		if err != nil && code != http.StatusTooManyRequests {
			t.Fatalf("submit %d: HTTP %d: %v", i, code, err)
		}
		refused = err
	}
	held := 0
	for _, rec := range records(node) {
		held += len(rec.Args)
	}
	if held > MaxJobsBytes {
		t.Errorf("the cluster keeps %d jobs whose records take %d bytes, over %d", len(records(node)), held, MaxJobsBytes)
	}
	if refused == nil || !strings.Contains(refused.Error(), "8 MiB bound") {
		t.Errorf("the submit past the bound: %v", refused)
	}
}

// Freed room is seen as room that grew (a node that offers resources
// joining, or more of a resource on one); jobs pending since earlier are
// counted ahead.
func TestRoomAndPendingOrder(t *testing.T) {
	views := []cluster.NodeView{
		{ID: "a", Total: cluster.Resources{cluster.CPU: 4}, Free: cluster.Resources{cluster.CPU: 1}},
		{ID: "driver", Total: cluster.Resources{}, Free: cluster.Resources{}},
	}
	before := freeRoom(views)
	if _, ok := before["driver"]; ok || len(before) != 1 {
		t.Fatalf("freeRoom counts a node that offers nothing: %v", before)
	}
	for _, c := range []struct {
		name string
		cur  []cluster.NodeView
		grew bool
	}{
		{"same", views, false},
		{"a driver node joins", append(views, cluster.NodeView{ID: "d2", Total: cluster.Resources{}}), false},
		{"a CPU freed", []cluster.NodeView{{ID: "a", Total: cluster.Resources{cluster.CPU: 4}, Free: cluster.Resources{cluster.CPU: 2}}}, true},
		{"a CPU taken", []cluster.NodeView{{ID: "a", Total: cluster.Resources{cluster.CPU: 4}, Free: cluster.Resources{}}}, false},
		{"a node joins", append(views, cluster.NodeView{ID: "b", Total: cluster.Resources{cluster.CPU: 1}, Free: cluster.Resources{cluster.CPU: 1}}), true},
	} {
		if got := roomGrew(before, freeRoom(c.cur)); got != c.grew {
			t.Errorf("%s: grew %v, want %v", c.name, got, c.grew)
		}
	}
	rec := func(name string, ms int64, state cluster.ActorState, note string) cluster.ActorRecord {
		typ, args, err := actor.EncodeMessage(Spec{Recipe: []byte("x"), Out: "/r/" + name, SubmittedMs: ms})
		if err != nil {
			t.Fatal(err)
		}
		return cluster.ActorRecord{Name: name, Kind: Kind, State: state, Note: note, ArgsType: typ, Args: args}
	}
	recs := []cluster.ActorRecord{
		rec("early", 100, cluster.Alive, PendingNote+"CPU"),
		rec("a-tie", 200, cluster.Alive, PendingNote+"CPU"),
		rec("me", 200, cluster.Alive, PendingNote+"CPU"),
		rec("running", 50, cluster.Alive, ""),
		rec("ended", 10, cluster.Dead, ""),
		rec("late", 300, cluster.Alive, PendingNote+"CPU"),
	}
	if n := pendingAhead(recs, "me", 200); n != 2 {
		t.Errorf("%d pending jobs ahead, want 2 (early, and a-tie by name)", n)
	}
	if n := pendingAhead(recs, "early", 100); n != 0 {
		t.Errorf("the earliest has %d ahead", n)
	}
}

// A submitted recipe's check (it reads the datasets the recipe names, up
// to a GiB) runs one at a time on a node and within Config.CheckTime:
// past it the submitter is told so, naming the node, and the job is
// never taken, even once the check ends; a submit that comes while
// another recipe is checked waits its turn within the same bound.
func TestSubmitBoundsTheRecipeCheck(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	node := serveJobs(t, cluster.Config{NodeID: "checker"}, Config{Executable: "/bin/true"})
	release := make(chan struct{})
	slow := Config{Executable: "/bin/true", CheckTime: time.Millisecond, Check: func([]byte) error { <-release; return nil }}
	dir := t.TempDir()
	req := func(name string) SubmitRequest {
		return SubmitRequest{Name: name, Recipe: "name: x\n", RecipeName: "x", Out: filepath.Join(dir, name)}
	}
	_, code, err := submit(ctx, node, slow, req("slow"), time.Now(), "")
	if code != http.StatusServiceUnavailable || err == nil || !strings.Contains(err.Error(), "node checker") || !strings.Contains(err.Error(), "not submitted") {
		t.Errorf("a check past its bound: HTTP %d: %v", code, err)
	}
	_, code, err = submit(ctx, node, slow, req("waits"), time.Now(), "")
	if code != http.StatusServiceUnavailable || err == nil || !strings.Contains(err.Error(), "another") {
		t.Errorf("a check while another runs: HTTP %d: %v", code, err)
	}
	close(release)
	// Once the slow check has ended, the next one takes its turn.
	quick := Config{Executable: "/bin/true", CheckTime: time.Minute, Check: func([]byte) error { return nil }}
	if _, code, err := submit(ctx, node, quick, req("quick"), time.Now(), ""); err != nil {
		t.Fatalf("a quick check after the slow one ended: HTTP %d: %v", code, err)
	}
	for _, rec := range records(node) {
		if rec.Name != "quick" {
			t.Errorf("job %s was taken after its submit was refused", rec.Name)
		}
	}
}

// A recipe file within MaxRecipeBytes is taken whatever its characters:
// JSON escapes '<', '>' and '&' (templates' tags) as six bytes and a
// newline as two, so its request body may be several times its size.
// One over the bound is refused naming the file and the bound.
func TestSubmitSourceUpToItsBound(t *testing.T) {
	t.Setenv("RLNODE_HOME", t.TempDir())
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	key := bytes.Repeat([]byte{3}, 32)
	runs := t.TempDir()
	node := serveJobs(t, cluster.Config{NodeID: "sizes", Key: key}, Config{Executable: "/bin/true", RunsDir: runs, Resolve: func(name string, src []byte, _, _ string, _ []string) ([]byte, string, error) {
		return []byte("name: tags\n"), "tags", nil
	}})
	ctrl, closeCtrl, err := node.ServeControl("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer closeCtrl()
	c := Client{Control: ctrl, Key: key}
	line := "# <answer> & </answer>\n"
	src := strings.Repeat(line, MaxRecipeBytes/len(line))
	if _, err := c.Submit(ctx, SubmitRequest{Name: "tags", SourceName: "tags.yaml", Source: src}); err != nil {
		t.Errorf("a recipe of %d bytes (bound %d): %v", len(src), MaxRecipeBytes, err)
	}
	over := src + strings.Repeat("#", MaxRecipeBytes-len(src)+1)
	_, err = c.Submit(ctx, SubmitRequest{Name: "over", SourceName: "over.yaml", Source: over})
	if err == nil || !strings.Contains(err.Error(), "over.yaml") || !strings.Contains(err.Error(), fmt.Sprint(MaxRecipeBytes)) {
		t.Errorf("a recipe of %d bytes (bound %d): %v", len(over), MaxRecipeBytes, err)
	}
}

// A job stopped while it lets the jobs pending since earlier go first
// (3 s each, up to a minute) ends at once: the stop was looked at only
// once that wait was over. Here the wait is made an hour long, so a stop
// that waited for it would not end the job within the test's minute.
func TestStopWhileOthersGoFirst(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		t.Fatal(err)
	}
	// Each job's "driver" finds no room.
	driver := filepath.Join(t.TempDir(), "noroom")
	if err := os.WriteFile(driver, []byte("#!/bin/sh\necho 'rlnode run: no node can host {CPU:8}'\nexit 75\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	node := serveJobs(t, cluster.Config{Key: key}, Config{Executable: driver})
	defer func(d time.Duration) { aheadWait = d }(aheadWait)
	aheadWait = time.Hour
	dir := t.TempDir()
	status := func(name string) (Info, bool) {
		rec, ok := node.Record(name)
		return info(rec), ok
	}
	for _, name := range []string{"a-first", "b-second"} {
		if _, code, err := submit(ctx, node, Config{}, SubmitRequest{Name: name, Recipe: "name: x\n", RecipeName: "x", Out: filepath.Join(dir, name)}, time.Now(), ""); err != nil {
			t.Fatalf("submit %s: HTTP %d: %v", name, code, err)
		}
		waitFor(t, ctx, name+" PENDING", func() bool { in, _ := status(name); return in.Status == Pending })
	}
	// Room grows: a node that offers a CPU joins.
	more, err := cluster.Start(ctx, cluster.Config{Bind: "127.0.0.1:0", CPUs: 1, Key: key, Join: []string{node.GossipAddress()}, Logger: actor.DiscardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer more.Stop()
	log := filepath.Join(dir, "b-second", LogFile)
	waitFor(t, ctx, "b-second to let a-first go first", func() bool {
		b, _ := os.ReadFile(log)
		return strings.Contains(string(b), "1 jobs pending since earlier go first")
	})
	h, err := node.Lookup(ctx, "b-second")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cluster.Call[okReply](ctx, h, stopRequest{}); err != nil {
		t.Fatal(err)
	}
	stopCtx, stopCancel := context.WithTimeout(ctx, time.Minute)
	defer stopCancel()
	waitFor(t, stopCtx, "b-second STOPPED", func() bool { in, _ := status("b-second"); return in.Status == Stopped })
	if in, _ := status("b-second"); !strings.Contains(in.Cause, "while it waited for room") {
		t.Errorf("b-second stopped while others went first: %+v", in)
	}
}

// waitFor polls cond until it holds, failing the test when ctx ends first.
func waitFor(t *testing.T, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("%s: not within the test's bound", what)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// serveJobs starts a node of one CPU that runs jobs (nc says the rest),
// serves jobs on it with jc, and undoes both when the test ends.
func serveJobs(t *testing.T, nc cluster.Config, jc Config) *cluster.Node {
	t.Helper()
	nc.Bind, nc.CPUs, nc.Labels, nc.Logger = "127.0.0.1:0", 1, map[string]string{Label: "yes"}, actor.DiscardLogger()
	node, err := cluster.Start(context.Background(), nc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(node.Stop)
	Serve(node, jc)
	t.Cleanup(func() {
		host.Lock()
		host.node = nil
		host.Unlock()
	})
	return node
}

// An ended job is deleted at once, leaving its run folder; a running one
// is refused until stopped; a deleted name is gone.
func TestDeleteJobs(t *testing.T) {
	t.Setenv("RLNODE_HOME", t.TempDir())
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// A "driver" that runs until stopped.
	exe := filepath.Join(t.TempDir(), "driver.sh")
	if err := os.WriteFile(exe, []byte("#!/bin/sh\nexec sleep 60\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	key := bytes.Repeat([]byte{5}, 32)
	node := serveJobs(t, cluster.Config{NodeID: "del", Key: key}, Config{Executable: exe, StopGrace: time.Second})
	ctrl, closeCtrl, err := node.ServeControl("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer closeCtrl()
	c := Client{Control: ctrl, Key: key}
	out := filepath.Join(t.TempDir(), "run")
	if _, err := c.Submit(ctx, SubmitRequest{Name: "long", Recipe: "name: long\n", RecipeName: "long", Out: out}); err != nil {
		t.Fatal(err)
	}
	status := func() string {
		in, err := c.Get(ctx, "long")
		if err != nil {
			return err.Error()
		}
		return in.Status
	}
	for deadline := time.Now().Add(time.Minute); status() != Running; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("job long: %s, want RUNNING", status())
		}
	}
	var he *HTTPError
	if _, err := c.Delete(ctx, "long"); !errors.As(err, &he) || he.Code != http.StatusConflict || !strings.Contains(he.Msg, "stop it first") {
		t.Errorf("deleting a running job: %v", err)
	}
	if err := c.Stop(ctx, "long", true); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(time.Minute); status() != Stopped; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("job long: %s, want STOPPED", status())
		}
	}
	in, err := c.Delete(ctx, "long")
	if err != nil || in.Name != "long" || in.Status != Stopped || in.Out != out {
		t.Fatalf("delete: %+v, %v", in, err)
	}
	if list, err := c.List(ctx); err != nil || len(list) != 0 {
		t.Errorf("jobs after the delete: %+v, %v", list, err)
	}
	if _, err := c.Get(ctx, "long"); !errors.As(err, &he) || he.Code != http.StatusNotFound {
		t.Errorf("status of the deleted job: %v", err)
	}
	if _, err := c.Delete(ctx, "long"); !errors.As(err, &he) || he.Code != http.StatusNotFound {
		t.Errorf("deleting it again: %v", err)
	}
	if _, err := os.Stat(out); err != nil {
		t.Errorf("the deleted job's run folder: %v", err)
	}
	// The name is free again.
	if _, err := c.Submit(ctx, SubmitRequest{Name: "long", Recipe: "name: long\n", RecipeName: "long", Out: filepath.Join(t.TempDir(), "run2")}); err != nil {
		t.Errorf("a job of the deleted one's name: %v", err)
	}
	if err := c.Stop(ctx, "long", true); err != nil {
		t.Error(err)
	}
}

// A node takes a job over only from a run folder that holds the lost
// attempt's log, and continues a --resume job only from one that holds a
// run: a folder it does not see (another host's) is not made empty here
// and started over.
func TestRunFolderChecks(t *testing.T) {
	root := t.TempDir()
	mk := func(name string, files ...string) string {
		dir := filepath.Join(root, name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			if err := os.WriteFile(filepath.Join(dir, f), nil, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return dir
	}
	for _, c := range []struct {
		dir        string
		takeover   string // what seesRunFolder's error says; "" for none
		resumeSays string // holdsARun's
	}{
		{mk("logged", LogFile), "", ""},
		{mk("ran", "recipe.yaml"), "lacks the job.log", ""},
		{mk("submitted", RecipeFile), "lacks the job.log", ""},
		{mk("empty"), "lacks the job.log", "holds no run here"},
		{filepath.Join(root, "elsewhere"), "does not see its run folder", "does not see the run folder"},
	} {
		err := seesRunFolder(c.dir)
		if (c.takeover == "") != (err == nil) || (err != nil && (!strings.Contains(err.Error(), c.takeover) || !strings.Contains(err.Error(), c.dir))) {
			t.Errorf("seesRunFolder(%s): %v, want %q", filepath.Base(c.dir), err, c.takeover)
		}
		err = holdsARun(c.dir)
		if (c.resumeSays == "") != (err == nil) || (err != nil && (!strings.Contains(err.Error(), c.resumeSays) || !strings.Contains(err.Error(), c.dir))) {
			t.Errorf("holdsARun(%s): %v, want %q", filepath.Base(c.dir), err, c.resumeSays)
		}
	}
	if _, err := os.Stat(filepath.Join(root, "elsewhere")); err == nil {
		t.Error("a check made the folder it does not see")
	}
}

// A job that found no room tries again, with no room grown, after 5 s,
// then after twice as long each time in a row, up to roomRetry: jobs
// submitted together that each took part of the room and all failed
// waited roomRetry on an idle cluster.
func TestRoomRetryAfter(t *testing.T) {
	for _, c := range []struct {
		n    int
		want time.Duration
	}{
		{1, 5 * time.Second}, {2, 10 * time.Second}, {3, 20 * time.Second}, {6, 160 * time.Second},
		{7, roomRetry}, {100, roomRetry},
	} {
		if got := roomRetryAfter(c.n); got != c.want {
			t.Errorf("roomRetryAfter(%d) = %v, want %v", c.n, got, c.want)
		}
	}
}
