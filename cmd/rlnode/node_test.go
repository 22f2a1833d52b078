package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rlnode/rlnode/cluster"
)

// The CLI tests run rlnode itself: this test binary re-executed with
// RLNODE_CLI_MAIN=1 is `rlnode` with the given arguments.
func TestMain(m *testing.M) {
	if os.Getenv("RLNODE_CLI_MAIN") == "1" {
		os.Exit(runMain(os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

func rlnodeCmd(t *testing.T, home string, args ...string) *exec.Cmd {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, args...)
	cmd.Env = append(os.Environ(), "RLNODE_CLI_MAIN=1", "RLNODE_HOME="+home)
	return cmd
}

// runRlnode runs a short rlnode command and returns its output and exit code.
// runGuard is how long runRlnode lets a command run before it takes it
// for hung: a hang detector, generous for a loaded 2-core host where a
// short run that takes 10 s alone can take minutes.
const runGuard = 5 * time.Minute

func runRlnode(t *testing.T, home string, args ...string) (string, string, int) {
	t.Helper()
	cmd := rlnodeCmd(t, home, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	done := make(chan error, 1)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(runGuard):
		// SIGQUIT: the Go runtime writes every goroutine to stderr, so the
		// failure says where it stalled.
		_ = cmd.Process.Signal(syscall.SIGQUIT)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		t.Fatalf("rlnode %v did not finish within %s\nstdout:\n%s\nstderr (with the goroutine dump):\n%s", args, runGuard, out.String(), errb.String())
	}
	return out.String(), errb.String(), cmd.ProcessState.ExitCode()
}

type runningNode struct {
	cmd    *exec.Cmd
	gossip string
	done   chan struct{}
	out    *bytes.Buffer
	stderr *bytes.Buffer
}

// startRlnode starts `rlnode start|join ...` and waits for its gossip line.
func startRlnode(t *testing.T, home string, args ...string) *runningNode {
	t.Helper()
	return startRlnodeIn(t, "", home, args...)
}

// startRlnodeIn is startRlnode in the working folder dir ("": this one).
func startRlnodeIn(t *testing.T, dir, home string, args ...string) *runningNode {
	t.Helper()
	cmd := rlnodeCmd(t, home, args...)
	cmd.Dir = dir
	return startNodeCmd(t, cmd, args)
}

// startNodeCmd starts cmd, an rlnode node with args, as startRlnode does.
func startNodeCmd(t *testing.T, cmd *exec.Cmd, args []string) *runningNode {
	t.Helper()
	pr, pw := io.Pipe()
	cmd.Stdout = pw
	var errb bytes.Buffer
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	rn := &runningNode{cmd: cmd, done: make(chan struct{}), out: &bytes.Buffer{}, stderr: &errb}
	go func() { _ = cmd.Wait(); pw.Close(); close(rn.done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-rn.done
	})
	// The banner ends with the join hint; the banner is complete then.
	gossip := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		var g string
		var banner bytes.Buffer
		for sc.Scan() {
			line := sc.Text()
			banner.WriteString(line + "\n")
			if f := strings.Fields(line); len(f) == 2 && f[0] == "gossip:" {
				g = f[1]
			}
			if strings.HasPrefix(line, "others join with:") {
				rn.out.Write(banner.Bytes())
				gossip <- g
			}
		}
	}()
	select {
	case g := <-gossip:
		rn.gossip = g
	case <-rn.done:
		t.Fatalf("rlnode %v exited: %s", args, errb.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("rlnode %v printed no gossip address in 30s: %s", args, errb.String())
	}
	return rn
}

// dumpOnFailure makes a failed test log the goroutines of the given nodes
// still running (SIGQUIT makes the Go runtime write them to stderr): a
// stall then shows the other side of the call too.
func dumpOnFailure(t *testing.T, nodes ...*runningNode) {
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		for _, n := range nodes {
			select {
			case <-n.done:
				continue
			default:
			}
			_ = n.cmd.Process.Signal(syscall.SIGQUIT)
			select {
			case <-n.done:
			case <-time.After(10 * time.Second):
			}
			t.Logf("node %v stderr:\n%s", n.cmd.Args[1:], n.stderr)
		}
	})
}

func TestStartJoinStatusStop(t *testing.T) {
	home := t.TempDir()
	a := startRlnode(t, home, "start", "--bind", "127.0.0.1:0", "--node-id", "alpha", "--gpus", "0")
	keyFile := filepath.Join(home, "cluster.key")
	if fi, err := os.Stat(keyFile); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v, mode %v", err, fi.Mode())
	}
	if !strings.Contains(a.out.String(), "rlnode join "+a.gossip+" --key-file "+keyFile) {
		t.Fatalf("start does not print how to join:\n%s", a.out.String())
	}
	b := startRlnode(t, home, "join", a.gossip, "--bind", "127.0.0.1:0", "--key-file", keyFile,
		"--node-id", "beta", "--gpus", "2", "--label", "zone=b", "--label", "rack=7", "--memory", "12GiB")

	var st struct {
		Nodes []struct {
			ID     string             `json:"id"`
			GPUs   []json.RawMessage  `json:"gpus"`
			Labels map[string]string  `json:"labels"`
			State  string             `json:"state"`
			Total  map[string]float64 `json:"total"`
		} `json:"nodes"`
		Actors []json.RawMessage `json:"actors"`
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		out, errOut, code := runRlnode(t, home, "status", "--address", a.gossip, "--json")
		if code != 0 {
			t.Fatalf("status: %s", errOut)
		}
		if err := json.Unmarshal([]byte(out), &st); err != nil {
			t.Fatalf("status JSON: %v\n%s", err, out)
		}
		// beta's two labels, and the one every start and join node carries (it runs jobs).
		if len(st.Nodes) == 2 && len(st.Nodes[1].Labels) == 3 || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if len(st.Nodes) != 2 || st.Nodes[0].ID != "alpha" || st.Nodes[1].ID != "beta" ||
		len(st.Nodes[1].GPUs) != 2 || st.Nodes[1].Labels["zone"] != "b" || st.Actors == nil ||
		st.Nodes[1].Total["memory"] != 12<<30 || st.Nodes[0].Total["memory"] <= 0 {
		t.Fatalf("status: %+v", st)
	}
	out, _, code := runRlnode(t, home, "status", "--address", b.gossip)
	if code != 0 || !strings.Contains(out, "alpha") || !strings.Contains(out, "rack=7,rlnode.jobs=yes,zone=b") ||
		!strings.Contains(out, "MEMORY (free/total)") || !strings.Contains(out, "12.0/12.0 GiB") {
		t.Fatalf("table status (%d):\n%s", code, out)
	}

	// A node with the wrong key is refused, in bounded time, with a clear error.
	bad := filepath.Join(t.TempDir(), "wrong.key")
	if err := os.WriteFile(bad, []byte("AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, errOut, code := runRlnode(t, home, "join", a.gossip, "--bind", "127.0.0.1:0", "--key-file", bad)
	if code == 0 || !strings.Contains(errOut, "no member answered") {
		t.Fatalf("wrong key join: code %d: %s", code, errOut)
	}
	_, errOut, code = runRlnode(t, home, "join", a.gossip, "--bind", "127.0.0.1:0", "--key-file", filepath.Join(home, "nope.key"))
	if code == 0 || !strings.Contains(errOut, "nope.key") {
		t.Fatalf("missing key file: code %d: %s", code, errOut)
	}
	_, errOut, code = runRlnode(t, home, "join", "--gpus", "many", a.gossip)
	if code != 2 || !strings.Contains(errOut, `--gpus "many"`) {
		t.Fatalf("bad --gpus: code %d: %s", code, errOut)
	}
	_, errOut, code = runRlnode(t, home, "join", "--memory", "12 gigs", a.gossip)
	if code != 2 || !strings.Contains(errOut, `--memory: size "12 gigs": unknown unit "gigs"`) {
		t.Fatalf("bad --memory: code %d: %s", code, errOut)
	}
	_, errOut, code = runRlnode(t, home, "join", "--detection", "slow", a.gossip)
	if code != 2 || !strings.Contains(errOut, `--detection: failure detection "slow": want fast or lan`) {
		t.Fatalf("bad --detection: code %d: %s", code, errOut)
	}

	// The control endpoint stops a node only for its own user's CLI: a
	// request without the token or from a foreign page is refused.
	runDir := filepath.Join(home, "run")
	if fi, err := os.Stat(filepath.Join(runDir, "beta.token")); err != nil {
		t.Fatalf("token file: %v", err)
	} else if fi.Mode().Perm() != 0o600 {
		t.Fatalf("token file mode %v, want 0600", fi.Mode())
	}
	var ri struct {
		Control string `json:"control_address"`
	}
	if b, err := os.ReadFile(filepath.Join(runDir, "beta.json")); err != nil || json.Unmarshal(b, &ri) != nil {
		t.Fatalf("run file: %v %s", err, b)
	}
	token, err := os.ReadFile(filepath.Join(runDir, "beta.token"))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ name, origin, auth string }{
		{"no token", "", ""},
		{"a wrong token", "", "Bearer x"},
		{"a foreign origin", "http://evil.example", "Bearer " + strings.TrimSpace(string(token))},
	} {
		req, _ := http.NewRequest(http.MethodPost, "http://"+ri.Control+"/stop", strings.NewReader("{}"))
		req.Header.Set("Content-Type", "text/plain")
		if c.origin != "" {
			req.Header.Set("Origin", c.origin)
		}
		if c.auth != "" {
			req.Header.Set("Authorization", c.auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("stop with %s: %v", c.name, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized && resp.StatusCode != http.StatusForbidden {
			t.Fatalf("stop with %s: HTTP %d, want 401 or 403", c.name, resp.StatusCode)
		}
	}
	select {
	case <-b.done:
		t.Fatal("a stop request without the token stopped the node")
	case <-time.After(500 * time.Millisecond):
	}
	if _, errOut, code := runRlnode(t, home, "status", "--address", b.gossip); code != 0 {
		t.Fatalf("status after refused stops: %s", errOut)
	}

	// stop: the node leaves gracefully and the other sees it at once.
	out, errOut, code = runRlnode(t, home, "stop", "--address", b.gossip)
	if code != 0 || !strings.Contains(out, "node beta stopped") {
		t.Fatalf("stop: code %d: %s %s", code, out, errOut)
	}
	select {
	case <-b.done:
	case <-time.After(10 * time.Second):
		t.Fatal("stopped node still running")
	}
	out, _, _ = runRlnode(t, home, "status", "--address", a.gossip, "--json")
	if err := json.Unmarshal([]byte(out), &st); err != nil || len(st.Nodes) != 1 {
		t.Fatalf("status after stop: %v %s", err, out)
	}
	if _, errOut, code := runRlnode(t, home, "status", "--address", "127.0.0.1:1"); code == 0 || !strings.Contains(errOut, "127.0.0.1:1") {
		t.Fatalf("status of an unknown node: %d %s", code, errOut)
	}
	if out, _, code := runRlnode(t, home, "stop"); code != 0 || !strings.Contains(out, "alpha") {
		t.Fatalf("stop of the only node: %d %s", code, out)
	}
}

// A second node on this host under the id of a running one is refused:
// joining the same cluster (the id is taken there), or starting a cluster
// of its own (its run file would replace the first node's, which status
// and stop would then no longer find).
func TestParseMemoryFlag(t *testing.T) {
	for in, want := range map[string]int64{"auto": 0, "0": cluster.NoMemory, "64GiB": 64 << 30, "500MB": 500e6, "1.5G": 3 << 29, "1048576": 1 << 20} {
		if got, err := parseMemoryFlag(in); err != nil || got != want {
			t.Errorf("--memory %s: got %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "-1", "AUTO", "64GiBs", "1,5G"} {
		if got, err := parseMemoryFlag(in); err == nil {
			t.Errorf("--memory %q: got %d; want an error", in, got)
		}
	}
}

// The table shows memory in GiB, free/total, apart from custom resources.
func TestPrintStatusMemory(t *testing.T) {
	var b strings.Builder
	printStatus(&b, cluster.Status{Nodes: []cluster.NodeStatus{{ID: "n1", State: "ALIVE",
		Total: cluster.Resources{cluster.CPU: 4, cluster.Memory: 40 << 30, "tpu": 2},
		Free:  cluster.Resources{cluster.CPU: 3, cluster.Memory: 23.4 * (1 << 30), "tpu": 1}}}})
	out := b.String()
	if !strings.Contains(out, "MEMORY (free/total)") || !strings.Contains(out, "23.4/40.0 GiB") || !strings.Contains(out, "tpu=1/2") || strings.Contains(out, "memory=") {
		t.Errorf("status table:\n%s", out)
	}
}

// A node whose clock is far from the queried node's gets a line saying
// so; one a second off does not. With no actors the table says so.
func TestPrintStatusClockSkew(t *testing.T) {
	var b strings.Builder
	printStatus(&b, cluster.Status{Node: "head", Nodes: []cluster.NodeStatus{
		{ID: "head", State: "ALIVE"}, {ID: "w1", State: "ALIVE", ClockOffsetS: -312.4}, {ID: "w2", State: "ALIVE", ClockOffsetS: 1.2}}})
	out := b.String()
	if !strings.Contains(out, "the clock of node w1 is 5m12s behind head's") || strings.Contains(out, "node w2") || !strings.Contains(out, "no actors") {
		t.Errorf("status:\n%s", out)
	}
}

// Nodes of one wire protocol but different builds get a line naming
// each build and its nodes; nodes of one build do not.
func TestPrintStatusBuilds(t *testing.T) {
	var b strings.Builder
	printStatus(&b, cluster.Status{Node: "head", Nodes: []cluster.NodeStatus{
		{ID: "head", State: "ALIVE", Build: "v0.3.0 (aaa)"}, {ID: "w1", State: "ALIVE", Build: "v0.3.1 (bbb)"}, {ID: "w2", State: "ALIVE", Build: "v0.3.0 (aaa)"}}})
	if out := b.String(); !strings.Contains(out, "nodes run different builds of one wire protocol: v0.3.0 (aaa) on head, w2; v0.3.1 (bbb) on w1") {
		t.Errorf("status:\n%s", out)
	}
	b.Reset()
	printStatus(&b, cluster.Status{Node: "head", Nodes: []cluster.NodeStatus{{ID: "head", State: "ALIVE", Build: "v0.3.0 (aaa)"}, {ID: "w1", State: "ALIVE", Build: "v0.3.0 (aaa)"}}})
	if out := b.String(); strings.Contains(out, "different builds") {
		t.Errorf("one build, yet:\n%s", out)
	}
}

// A placement group waiting for room is listed PENDING with what it
// waits for; a created one with its nodes.
func TestPrintStatusPendingGroup(t *testing.T) {
	var b strings.Builder
	printStatus(&b, cluster.Status{Node: "head", Nodes: []cluster.NodeStatus{{ID: "head", State: "ALIVE"}}, Groups: []cluster.GroupStatus{
		{ID: "pg-1", Strategy: cluster.Spread, Nodes: []string{"head", "w1"}, State: "CREATED"},
		{ID: "pg-2", Strategy: cluster.StrictPack, Nodes: []string{}, State: "PENDING", Pending: "{GPU:2} in 1 bundle: missing GPU 2 (has 0) free; held by actor a ({GPU:2} on w1)"}}})
	out := b.String()
	if !strings.Contains(out, "placement group pg-1 SPREAD on head,w1\n") ||
		!strings.Contains(out, "placement group pg-2 STRICT_PACK PENDING: {GPU:2} in 1 bundle: missing GPU 2 (has 0) free; held by actor a ({GPU:2} on w1)\n") {
		t.Errorf("status:\n%s", out)
	}
}

func TestNodeIDInUseRefused(t *testing.T) {
	home := t.TempDir()
	a := startRlnode(t, home, "start", "--bind", "127.0.0.1:0", "--node-id", "alpha", "--gpus", "0")
	keyFile := filepath.Join(home, "cluster.key")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"join", a.gossip, "--key-file", keyFile}, `node id "alpha" is taken: a live member of the cluster has it at ` + a.gossip},
		{[]string{"start"}, "node id alpha already runs on this host"},
	} {
		args := append(c.args, "--bind", "127.0.0.1:0", "--node-id", "alpha", "--gpus", "0", "--detach")
		out, errOut, code := runRlnode(t, home, args...)
		if code == 0 {
			for _, line := range strings.Split(out, "\n") {
				if f := strings.Fields(line); len(f) == 2 && f[0] == "pid:" {
					if pid, err := strconv.Atoi(f[1]); err == nil {
						_ = syscall.Kill(pid, syscall.SIGKILL)
					}
				}
			}
			t.Errorf("rlnode %s: a second node alpha came up:\n%s", strings.Join(args, " "), out)
			continue
		}
		if !strings.Contains(errOut, c.want) {
			t.Errorf("rlnode %s: exit %d, stderr lacks %q:\n%s", strings.Join(args, " "), code, c.want, errOut)
		}
	}
	// status still reaches the first node by its id.
	out, errOut, code := runRlnode(t, home, "status", "--address", "alpha", "--json")
	if code != 0 || !strings.Contains(out, `"gossip_address": "`+a.gossip+`"`) {
		t.Errorf("status --address alpha: exit %d, want the first node at %s:\n%s%s", code, a.gossip, out, errOut)
	}
}

// A start or join on a port a node holds says which node holds it and how
// to see or stop it (it used to say only "address already in use"), and,
// when no node of this RLNODE_HOME does, that one of another may.
func TestPortTakenHint(t *testing.T) {
	home := t.TempDir()
	a := startRlnode(t, home, "start", "--bind", "127.0.0.1:0", "--node-id", "alpha", "--gpus", "0")
	var control string
	for _, line := range strings.Split(a.out.String(), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "control:" {
			control = f[1]
		}
	}
	if control == "" {
		t.Fatalf("no control address in the banner:\n%s", a.out)
	}
	keyFile := filepath.Join(home, "cluster.key")
	for _, c := range []struct {
		home string
		args []string
		want []string
	}{
		{home, []string{"start", "--bind", a.gossip}, []string{"address already in use",
			"node alpha already runs there (pid ", "rlnode status --address " + a.gossip, "rlnode stop --address " + a.gossip, "give --bind another port"}},
		{home, []string{"start", "--bind", "127.0.0.1:0", "--status-bind", control, "--detach"}, []string{"control endpoint",
			"node alpha already runs there", "give --status-bind another port"}},
		{t.TempDir(), []string{"join", a.gossip, "--bind", a.gossip, "--key-file", keyFile}, []string{"address already in use",
			"no node of this RLNODE_HOME", "a node started with another RLNODE_HOME or by another user may"}},
	} {
		_, errOut, code := runRlnode(t, c.home, append(c.args, "--gpus", "0")...)
		if code == 0 {
			t.Errorf("rlnode %v: a second node came up on a taken port", c.args)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(errOut, w) {
				t.Errorf("rlnode %v: exit %d, stderr lacks %q:\n%s", c.args, code, w, errOut)
			}
		}
	}
}

// A node killed with SIGKILL leaves its run file. status and stop say the
// node is gone (its process is not running, or its pid now belongs to
// another process) and remove the file, where they used to skip it
// without a word (or, with the pid reused, fail on "connection refused"),
// leaving it forever.
func TestKilledNodeRunFileReported(t *testing.T) {
	home := t.TempDir()
	runDir := filepath.Join(home, "run")
	kill := func(id string) (pid int) {
		t.Helper()
		n := startRlnode(t, home, "start", "--bind", "127.0.0.1:0", "--node-id", id, "--gpus", "0", "--cpus", "1")
		pid = n.cmd.Process.Pid
		if err := n.cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		<-n.done
		if _, err := os.Stat(filepath.Join(runDir, id+".json")); err != nil {
			t.Fatalf("the killed node %s left no run file to test with: %v", id, err)
		}
		return pid
	}
	gone := func(cmd, id string, code int, out, errOut string, want ...string) {
		t.Helper()
		for _, w := range want {
			if !strings.Contains(errOut, w) {
				t.Errorf("%s after %s was killed: exit %d, stderr lacks %q:\n%s%s", cmd, id, code, w, out, errOut)
			}
		}
		for _, f := range []string{id + ".json", id + ".token"} {
			if _, err := os.Stat(filepath.Join(runDir, f)); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("%s after %s was killed: %s still there (%v)", cmd, id, f, err)
			}
		}
	}

	pid := kill("killed")
	out, errOut, code := runRlnode(t, home, "stop", "--address", "killed")
	if code != 1 {
		t.Errorf("stop --address of a killed node: exit %d, want 1", code)
	}
	gone("stop --address", "killed", code, out, errOut, "node killed", "is gone",
		fmt.Sprintf("process %d is not running", pid), "SIGKILL", "removed it")

	// The killed node's pid taken by another process (this test's).
	kill("reused")
	runFile := filepath.Join(runDir, "reused.json")
	b, err := os.ReadFile(runFile)
	if err != nil {
		t.Fatal(err)
	}
	var ri map[string]any
	if err := json.Unmarshal(b, &ri); err != nil {
		t.Fatal(err)
	}
	ri["pid"] = os.Getpid()
	if b, err = json.Marshal(ri); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(runFile, b, 0o600); err != nil {
		t.Fatal(err)
	}
	out, errOut, code = runRlnode(t, home, "status")
	if code != 1 {
		t.Errorf("status with only a killed node's run file: exit %d, want 1", code)
	}
	gone("status", "reused", code, out, errOut, "node reused", "is gone",
		fmt.Sprintf("pid %d now belongs to another process", os.Getpid()), "removed it")
}

// A control endpoint bound to a wildcard address is shown with the URL
// other hosts reach it at (the banner said only "[::]:PORT").
func TestRemoteControlHint(t *testing.T) {
	for _, c := range []struct{ ctrl, gossip, want string }{
		{"[::]:8266", "10.0.0.5:7946", " (from other hosts: --address http://10.0.0.5:8266)"},
		{"0.0.0.0:8266", "10.0.0.5:7946", " (from other hosts: --address http://10.0.0.5:8266)"},
		{"127.0.0.1:8266", "127.0.0.1:7946", ""},
		{"10.0.0.5:8266", "10.0.0.5:7946", ""},
		{"[::]:8266", "[fd00::5]:7946", " (from other hosts: --address http://[fd00::5]:8266)"},
	} {
		if got := remoteControl(c.ctrl, c.gossip); got != c.want {
			t.Errorf("remoteControl(%s, %s) = %q, want %q", c.ctrl, c.gossip, got, c.want)
		}
	}
}

// An ALIVE actor's note shows where a dead one's cause does.
func TestPrintStatusNotes(t *testing.T) {
	var b strings.Builder
	printStatus(&b, cluster.Status{Actors: []cluster.ActorStatus{
		{Name: "waiting", Kind: "rlnode.job", Node: "n1", State: cluster.Alive, Note: "waiting for room: no node can host {CPU:4}"},
		{Name: "gone", Kind: "learner", Node: "n1", State: cluster.Dead, Cause: "stopped", Note: "stale"},
	}})
	out := b.String()
	if !strings.Contains(out, "waiting for room: no node can host {CPU:4}") || !strings.Contains(out, "stopped") || strings.Contains(out, "stale") {
		t.Errorf("status table:\n%s", out)
	}
}

// stop --all stops the nodes of this RLNODE_HOME, found by the run files
// under it; a node of the cluster started on this host with another home
// went on running, unmentioned, after "node alpha stopped" (a cluster on
// one machine with a home per node, as three hosts would have). It is
// named now, with how to stop it, and left running.
func TestStopAllNamesNodesOfOtherHomes(t *testing.T) {
	home, other := t.TempDir(), t.TempDir()
	a := startRlnode(t, home, "start", "--bind", "127.0.0.1:0", "--node-id", "alpha", "--gpus", "0", "--cpus", "1")
	b := startRlnode(t, other, "join", a.gossip, "--bind", "127.0.0.1:0", "--node-id", "beta", "--gpus", "0", "--cpus", "1",
		"--key-file", filepath.Join(home, "cluster.key"))
	waitUntil(t, time.Minute, "alpha to see beta", func() bool {
		out, _, _ := runRlnode(t, home, "status", "--json")
		return strings.Contains(out, `"id": "beta"`)
	})
	out, errOut, code := runRlnode(t, home, "stop", "--all")
	want := "1 more node of the cluster runs on this host, started with another RLNODE_HOME than " + home + ": beta (" + b.gossip + "); stop each with the RLNODE_HOME it started with"
	if code != 0 || !strings.Contains(out, "node alpha stopped") || !strings.Contains(errOut, want) {
		t.Errorf("stop --all: exit %d\n%s%s\nwant %q", code, out, errOut, want)
	}
	select {
	case <-b.done:
		t.Errorf("beta stopped with the other home's stop --all")
	default:
	}
	if out, errOut, code := runRlnode(t, other, "stop", "--all"); code != 0 || !strings.Contains(out, "node beta stopped") || strings.Contains(errOut, "more node") {
		t.Errorf("stop --all of beta's home: exit %d\n%s%s", code, out, errOut)
	}
}
