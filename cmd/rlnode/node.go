package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/rlnode/rlnode/actor"
	"github.com/rlnode/rlnode/cluster"
	"github.com/rlnode/rlnode/dashboard"
	"github.com/rlnode/rlnode/jobs"
	"github.com/rlnode/rlnode/recipes"
	"github.com/rlnode/rlnode/rollout/vllm"
	"github.com/rlnode/rlnode/train"
)

func init() {
	commands["start"] = func(args []string, stdout, stderr io.Writer) int { return nodeCommand("start", args, stdout, stderr) }
	commands["join"] = func(args []string, stdout, stderr io.Writer) int { return nodeCommand("join", args, stdout, stderr) }
	commands["status"] = statusCommand
	commands["stop"] = stopCommand
}

// detectionFlag adds --detection, the failure-detection preset of the
// process's node (cluster.ParseDetection).
func detectionFlag(fs *flag.FlagSet) *string {
	return fs.String("detection", "fast", "failure detection: fast (a lost node is noticed in about 1 s, and a node frozen for 2 s is taken for lost) or lan (about 11 s; a node frozen for 3 s is not)")
}

// repeated collects a repeatable flag.
type repeated []string

func (r *repeated) String() string     { return strings.Join(*r, ",") }
func (r *repeated) Set(v string) error { *r = append(*r, v); return nil }

func nodeCommand(verb string, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("rlnode "+verb, flag.ContinueOnError)
	fs.SetOutput(stderr)
	bind := fs.String("bind", "0.0.0.0:7946", "gossip address HOST:PORT (port 0 picks a free one)")
	advertise := fs.String("advertise", "", "host other nodes reach this one at (default: the bind host, or a private IP when binding 0.0.0.0)")
	actorBind := fs.String("actor-bind", "", "actor transport address HOST:PORT (default: bind host, a free port)")
	keyFile := fs.String("key-file", filepath.Join(cluster.Home(), "cluster.key"), "gossip encryption key file")
	gpus := fs.String("gpus", "auto", "GPUs this node offers: auto (detect NVIDIA GPUs) or a number")
	cpus := fs.Float64("cpus", 0, "CPUs this node offers (default: all cores)")
	memory := fs.String("memory", "auto", "memory this node offers: auto (the host's, or its cgroup's limit when lower: a Slurm job's, a container's) or a size: 64GiB, 500MB, 1.5G (K M G T alone are powers of 1024), plain bytes; 0 offers none")
	nodeID := fs.String("node-id", "", "node id (default: hostname plus a random suffix)")
	control := fs.String("status-bind", "127.0.0.1:0", "control endpoint HOST:PORT that rlnode status and rlnode stop talk to (loopback unless told otherwise)")
	tlsCert := fs.String("tls-cert", "", "PEM certificate for the actor transport (mutual TLS)")
	tlsKey := fs.String("tls-key", "", "PEM private key for --tls-cert")
	tlsCA := fs.String("tls-ca", "", "PEM CA that signed every node's certificate")
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
	detection := detectionFlag(fs)
	vllmCommand := fs.String("vllm", "", `start the vLLM servers runs ask for (engines.*.vllm.launch) on this node's GPUs with COMMAND, e.g. "vllm serve" or "/opt/venv/bin/vllm serve" (the model and options follow it); default: none here`)
	detach := fs.Bool("detach", false, "run in the background, logging to a file under $RLNODE_HOME/logs; returns once the node is up")
	var labels, resources, dashRuns, dashTraces, caps repeated
	var dash dashboardFlag
	fs.Var(&dash, "dashboard", "serve the dashboard's pages too: --dashboard (on 127.0.0.1:8265) or --dashboard=HOST:PORT")
	fs.Var(&dashRuns, "dashboard-runs", "folder of runs the dashboard lists (repeatable; default: the current folder)")
	fs.Var(&dashTraces, "dashboard-traces", "trace store the dashboard shows besides each run's traces/ (repeatable)")
	fs.Var(&labels, "label", "node label k=v (repeatable)")
	fs.Var(&resources, "resource", "custom resource NAME=AMOUNT (repeatable)")
	fs.Var(&caps, "max-conns-per-addr", fmt.Sprintf("PORT=N: connections one remote address (an IPv6 one with its /64, so hosts sharing a /64 share it) may hold open on PORT: gossip (streams; default %d), actor (the actor port, and the bulk port; %d), control (%d) or dashboard (%d); N from 1 to %d (repeatable)",
		cluster.DefaultGossipConnsPerAddr, actor.DefaultMaxConnsPerAddr, cluster.DefaultControlConnsPerAddr, dashboard.DefaultConnsPerAddr, cluster.MaxConnsPerAddr))
	fs.Usage = func() {
		if verb == "start" {
			fmt.Fprintf(stderr, "usage: rlnode start [flags]\n\nStarts the first node of a cluster and runs it in the foreground (--detach: in the background).\n\n")
		} else {
			fmt.Fprintf(stderr, "usage: rlnode join HOST:PORT [flags]\n\nJoins the cluster a member at HOST:PORT (its gossip address) belongs to, in the\nforeground (--detach: in the background). Bound to a wildcard address, the node\nadvertises its address on the route to HOST, of HOST's family.\n\n")
		}
		fs.PrintDefaults()
	}
	// Accept the join address before or after the flags.
	var positional []string
	rest := args
	for {
		if err := fs.Parse(rest); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return 0
			}
			return 2
		}
		if fs.NArg() == 0 {
			break
		}
		positional = append(positional, fs.Arg(0))
		rest = fs.Args()[1:]
	}
	if dash.err != nil {
		fmt.Fprintf(stderr, "rlnode %s: %v\n", verb, dash.err)
		return 2
	}
	cfg := cluster.Config{Bind: *bind, Advertise: *advertise, ActorBind: *actorBind, CPUs: *cpus, NodeID: *nodeID}
	det, err := cluster.ParseDetection(*detection)
	if err != nil {
		fmt.Fprintf(stderr, "rlnode %s: --detection: %v\n", verb, err)
		return 2
	}
	cfg.Detection = det
	switch verb {
	case "start":
		if len(positional) != 0 {
			fmt.Fprintf(stderr, "rlnode start: unexpected argument %q\n", positional[0])
			return 2
		}
	case "join":
		if len(positional) != 1 {
			fmt.Fprintln(stderr, "rlnode join: want exactly one address, HOST:PORT of any member")
			return 2
		}
		cfg.Join = positional
	}
	if *gpus == "auto" {
		cfg.GPUs = -1
	} else if n, err := strconv.Atoi(*gpus); err == nil && n >= 0 {
		cfg.GPUs = n
	} else {
		fmt.Fprintf(stderr, "rlnode %s: --gpus %q: want auto or a non-negative number\n", verb, *gpus)
		return 2
	}
	if cfg.Memory, err = parseMemoryFlag(*memory); err != nil {
		fmt.Fprintf(stderr, "rlnode %s: --memory: %v\n", verb, err)
		return 2
	}
	cfg.Labels = map[string]string{}
	for _, l := range labels {
		k, v, ok := strings.Cut(l, "=")
		if !ok || k == "" {
			fmt.Fprintf(stderr, "rlnode %s: --label %q: want k=v\n", verb, l)
			return 2
		}
		cfg.Labels[k] = v
	}
	if _, ok := cfg.Labels[jobs.Label]; !ok {
		cfg.Labels[jobs.Label] = "yes" // rlnode submit's jobs may run here
	}
	if c := strings.Fields(*vllmCommand); len(c) > 0 {
		if err := vllm.OfferServers(c); err != nil {
			fmt.Fprintf(stderr, "rlnode %s: --vllm: %v\n", verb, err)
			return 2
		}
		cfg.Labels[vllm.LaunchLabel] = "on" // runs' launches are placed here
	} else if cfg.Labels[vllm.LaunchLabel] != "" {
		fmt.Fprintf(stderr, "rlnode %s: --label %s=%s: that label says the node launches vLLM servers; give --vllm COMMAND instead\n", verb, vllm.LaunchLabel, cfg.Labels[vllm.LaunchLabel])
		return 2
	}
	res, err := cluster.ParseResources(strings.Join(resources, ","))
	if err != nil {
		fmt.Fprintf(stderr, "rlnode %s: --resource: %v\n", verb, err)
		return 2
	}
	cfg.Resources = res
	dashCap := 0
	for _, c := range caps {
		port, n, err := parseConnCap(c)
		if err == nil {
			switch port {
			case "gossip":
				cfg.ConnsPerAddr.Gossip = n
			case "actor":
				cfg.ConnsPerAddr.Actor = n
			case "control":
				cfg.ConnsPerAddr.Control = n
			case "dashboard":
				dashCap = n
			default:
				err = fmt.Errorf("port %q: want gossip, actor, control or dashboard", port)
			}
		}
		if err != nil {
			fmt.Fprintf(stderr, "rlnode %s: --max-conns-per-addr %s: %v\n", verb, c, err)
			return 2
		}
	}
	if *tlsCert != "" || *tlsKey != "" || *tlsCA != "" {
		if *tlsCert == "" || *tlsKey == "" || *tlsCA == "" {
			fmt.Fprintf(stderr, "rlnode %s: TLS needs all of --tls-cert, --tls-key and --tls-ca\n", verb)
			return 2
		}
		cfg.TLS = &actor.TLSFiles{CertFile: *tlsCert, KeyFile: *tlsKey, CAFile: *tlsCA}
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		fmt.Fprintf(stderr, "rlnode %s: --log-level %q: want debug, info, warn or error\n", verb, *logLevel)
		return 2
	}
	cfg.Logger = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))

	key, created, err := cluster.LoadOrCreateKey(*keyFile, verb == "start")
	if err != nil {
		fmt.Fprintf(stderr, "rlnode %s: %v\n", verb, err)
		if verb == "join" && errors.Is(err, os.ErrNotExist) {
			fmt.Fprintln(stderr, "copy the key file from the first node (rlnode start prints its path), readable by its owner only (chmod 600)")
		}
		return 1
	}
	cfg.Key = key
	if *detach {
		return detachNode(verb, args, created, stdout, stderr)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	node, err := cluster.Start(ctx, cfg)
	if err != nil {
		fmt.Fprintf(stderr, "rlnode %s: %v\n", verb, err)
		portTakenHint(stderr, "--bind", *bind, err)
		return 1
	}
	absKey, err := filepath.Abs(*keyFile)
	if err != nil {
		node.Stop()
		fmt.Fprintf(stderr, "rlnode %s: --key-file: %v\n", verb, err)
		return 1
	}
	runsDir, err := filepath.Abs("runs")
	if err != nil {
		node.Stop()
		fmt.Fprintf(stderr, "rlnode %s: %v\n", verb, err)
		return 1
	}
	jobs.Serve(node, jobs.Config{KeyFile: absKey, RunsDir: runsDir, Check: checkJobRecipe, Resolve: resolveJobRecipe, PackagesDir: filepath.Join(cluster.Home(), "packages")})
	ctrl, closeCtrl, err := node.ServeControl(*control)
	if err != nil {
		node.Stop()
		fmt.Fprintf(stderr, "rlnode %s: %v\n", verb, err)
		portTakenHint(stderr, "--status-bind", *control, err)
		return 1
	}
	defer closeCtrl()
	dashLine := ""
	if dash.addr != "" {
		srv, err := serveNodeDashboard(node, dash.addr, dashRuns, dashTraces, dashCap)
		if err != nil {
			node.Stop()
			fmt.Fprintf(stderr, "rlnode %s: %v\n", verb, err)
			return 1
		}
		defer srv.Close()
		dashLine = fmt.Sprintf("  dashboard: %s\n", srv.URL)
	}
	keyNote := ""
	if created {
		keyNote = " (created)"
	}
	mem, memFrom := node.Memory()
	fmt.Fprintf(stdout, "node %s is up\n  gossip:  %s\n  actors:  %s\n  control: %s%s\n  key:     %s%s\n  memory:  %s (%s)\n",
		node.ID(), node.GossipAddress(), node.ActorAddress(), ctrl, remoteControl(ctrl, node.GossipAddress()), *keyFile, keyNote, cluster.FormatBytes(mem), memFrom)
	fmt.Fprint(stdout, dashLine)
	fmt.Fprintf(stdout, "others join with: rlnode join %s --key-file %s\n", node.GossipAddress(), *keyFile)
	select {
	case <-ctx.Done():
		fmt.Fprintf(stdout, "node %s leaving\n", node.ID())
		node.Stop()
	case <-node.Done():
	}
	fmt.Fprintf(stdout, "node %s stopped\n", node.ID())
	return 0
}

// parseMemoryFlag reads --memory: auto (0, detect), a size, or 0 (none).
func parseMemoryFlag(s string) (int64, error) {
	if s == "auto" {
		return 0, nil
	}
	v, err := cluster.ParseSize(s)
	switch {
	case err != nil:
		return 0, fmt.Errorf("%w; or auto", err)
	case v == 0:
		return cluster.NoMemory, nil
	}
	return v, nil
}

func statusCommand(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("rlnode status", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("address", "", "gossip address (or node id) of a node running on this host, or http://HOST:PORT, a node's control endpoint on another host")
	asJSON := fs.Bool("json", false, "print JSON with top-level arrays nodes and actors")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: rlnode status [--address HOST:PORT | --address http://HOST:PORT] [--json]\n\nShows the cluster's nodes (resources free/total, custom ones included) and actors,\nasked of a node running on this host, or of the node whose control endpoint\nlistens at http://HOST:PORT.\n\n")
		fs.PrintDefaults()
	}
	if code, ok := parseNoArgs(fs, args); !ok {
		return code
	}
	var ri cluster.RunInfo
	var err error
	if isRemote(*addr) {
		ri.Control, err = controlURL(*addr)
		ri.NodeID = "at " + ri.Control
	} else {
		ri, err = findClusterNode(*addr)
	}
	if err != nil {
		if !errors.Is(err, cluster.ErrNodeGone) {
			fmt.Fprintf(stderr, "rlnode status: %v\n", err)
		}
		clearStale("rlnode status", stderr)
		return 1
	}
	if !isRemote(*addr) {
		clearStale("rlnode status", stderr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := cluster.FetchStatus(ctx, ri.Control)
	if err != nil {
		fmt.Fprintf(stderr, "rlnode status: node %s: %v\n", ri.NodeID, err)
		return 1
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(st)
		return 0
	}
	printStatus(stdout, st)
	return 0
}

// buildsOf lists the builds nodes run, each with its nodes ("BUILD on
// n1, n2"), sorted; nodes whose record has no build yet are left out.
func buildsOf(nodes []cluster.NodeStatus) []string {
	on := map[string][]string{}
	for _, n := range nodes {
		if n.Build != "" {
			on[n.Build] = append(on[n.Build], n.ID)
		}
	}
	var out []string
	for b, ids := range on {
		out = append(out, b+" on "+strings.Join(ids, ", "))
	}
	sort.Strings(out)
	return out
}

func printStatus(w io.Writer, st cluster.Status) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "NODE\tSTATE\tGOSSIP\tACTORS\tCPU (free/total)\tGPU (free/total)\tMEMORY (free/total)\tCUSTOM (free/total)\tLABELS\tTASKS\tUPTIME\n")
	for _, n := range st.Nodes {
		var labels, custom []string
		for k, v := range n.Labels {
			labels = append(labels, k+"="+v)
		}
		sort.Strings(labels)
		for k, v := range n.Total {
			if k != cluster.CPU && k != cluster.GPU && k != cluster.Memory {
				custom = append(custom, fmt.Sprintf("%s=%g/%g", k, n.Free[k], v))
			}
		}
		sort.Strings(custom)
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%g/%g\t%g/%g\t%s\t%s\t%s\t%d\t%s\n", n.ID, n.State, n.Gossip, n.Actor,
			n.Free[cluster.CPU], n.Total[cluster.CPU], n.Free[cluster.GPU], n.Total[cluster.GPU],
			fmtMemory(n.Free[cluster.Memory], n.Total[cluster.Memory]),
			dashIfEmpty(strings.Join(custom, ",")), dashIfEmpty(strings.Join(labels, ",")), n.Tasks, time.Duration(n.UptimeS*float64(time.Second)))
	}
	tw.Flush()
	for _, n := range st.Nodes {
		if off := time.Duration(n.ClockOffsetS * float64(time.Second)); off.Abs() > cluster.ClockSkewWarn {
			side := "ahead of"
			if off < 0 {
				side = "behind"
			}
			fmt.Fprintf(w, "the clock of node %s is %s %s %s's: keep the hosts' clocks in sync (NTP)\n",
				n.ID, off.Abs().Round(time.Second), side, st.Node)
		}
	}
	if builds := buildsOf(st.Nodes); len(builds) > 1 {
		fmt.Fprintf(w, "nodes run different builds of one wire protocol: %s; install one rlnode on every host\n", strings.Join(builds, "; "))
	}
	fmt.Fprintln(w)
	if len(st.Actors) == 0 {
		fmt.Fprintln(w, "no actors")
	}
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	if len(st.Actors) > 0 {
		fmt.Fprintf(tw, "ACTOR\tKIND\tNODE\tSTATE\tRESTARTS\tDEATH CAUSE (ALIVE: NOTE)\n")
	}
	for _, a := range st.Actors {
		why := a.Cause
		if a.State == cluster.Alive {
			why = a.Note
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\n", a.Name, a.Kind, a.Node, a.State, a.Restarts, printable(why))
	}
	tw.Flush()
	if len(st.Groups) > 0 {
		fmt.Fprintln(w)
		for _, g := range st.Groups {
			if g.State == "PENDING" {
				fmt.Fprintf(w, "placement group %s %s PENDING: %s\n", g.ID, g.Strategy, g.Pending)
				continue
			}
			fmt.Fprintf(w, "placement group %s %s on %s\n", g.ID, g.Strategy, strings.Join(g.Nodes, ","))
		}
	}
}

// fmtMemory writes a node's free/total memory in GiB ("23.4/62.7 GiB").
func fmtMemory(free, total float64) string {
	const gib = 1 << 30
	return fmt.Sprintf("%.1f/%.1f GiB", free/gib, total/gib)
}

// stopWait bounds how long `rlnode stop` waits for a node it asked to stop.
const stopWait = 45 * time.Second

func stopCommand(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("rlnode stop", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("address", "", "gossip address (or node id) of the node to stop, on this host")
	all := fs.Bool("all", false, "stop every node running on this host")
	jobWait := fs.Duration("stop-timeout", 30*time.Second, "how long the cluster's jobs get to stop after their current step when no node would be left to take them over")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: rlnode stop [--address HOST:PORT | --all] [--stop-timeout 30s]\n\nStops a node running on this host gracefully: its actors stop, then it leaves\nthe cluster. A job on a node that stops goes on on another node that runs\njobs; when no such node would be left (stop --all of a cluster on one\nmachine), each job is first asked to stop after its current step, which it\ncheckpoints, as rlnode job stop does.\n\n")
		fs.PrintDefaults()
	}
	if code, ok := parseNoArgs(fs, args); !ok {
		return code
	}
	if *jobWait <= 0 {
		fmt.Fprintf(stderr, "rlnode stop: --stop-timeout %v: want a positive duration\n", *jobWait)
		return 2
	}
	var nodes []cluster.RunInfo
	switch {
	case *all && *addr != "":
		fmt.Fprintln(stderr, "rlnode stop: --all and --address: pick one")
		return 2
	case isRemote(*addr):
		fmt.Fprintf(stderr, "rlnode stop: --address %s: a node is stopped from its own host (rlnode stop there, with its token), never through its control endpoint\n", *addr)
		return 2
	case *all:
		gone := clearStale("rlnode stop", stdout) // nothing to stop there: not a failure
		dir, infos, err := cluster.Running()
		if err != nil {
			fmt.Fprintf(stderr, "rlnode stop: %v\n", err)
			return 1
		}
		if len(infos) == 0 {
			if len(gone) == 0 {
				fmt.Fprintf(stdout, "no rlnode node runs on this host (%s)\n", cluster.LookedIn(dir))
			}
			return 0
		}
		nodes = infos
	default:
		ri, err := cluster.FindRunning(*addr)
		var several *cluster.SeveralNodesError
		if errors.As(err, &several) {
			err = fmt.Errorf("%w, or stop them all with --all", err)
		}
		if err != nil {
			if !errors.Is(err, cluster.ErrNodeGone) {
				fmt.Fprintf(stderr, "rlnode stop: %v\n", err)
			}
			clearStale("rlnode stop", stderr)
			return 1
		}
		nodes = []cluster.RunInfo{ri}
	}
	var elsewhere []cluster.NodeStatus
	if *all {
		elsewhere = sameHostElsewhere(nodes)
	}
	code := 0
	if !stopJobsFirst(nodes, *jobWait, stdout, stderr) {
		code = 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var asked []cluster.RunInfo
	for _, ri := range nodes {
		if err := cluster.RequestStop(ctx, ri.Control, ri.Token); err != nil {
			fmt.Fprintf(stderr, "rlnode stop: node %s: %v\n", ri.NodeID, err)
			code = 1
			continue
		}
		asked = append(asked, ri)
	}
	// Wait for the processes to leave, bounded: a node's stop may take a
	// build's cancel (10 s), an actor busy in Receive (10 s) and a member
	// that does not answer its last records (10 s) before it leaves.
	deadline := time.Now().Add(stopWait)
	for _, ri := range asked {
		for !processGone(ri.PID) && time.Now().Before(deadline) {
			time.Sleep(100 * time.Millisecond)
		}
		if processGone(ri.PID) {
			fmt.Fprintf(stdout, "node %s stopped\n", ri.NodeID)
		} else {
			fmt.Fprintf(stderr, "rlnode stop: node %s (pid %d) asked to stop but still running after %s (its log says why; kill %d ends it at once)\n", ri.NodeID, ri.PID, stopWait, ri.PID)
			code = 1
		}
	}
	if len(elsewhere) > 0 {
		var names []string
		for _, n := range elsewhere {
			names = append(names, fmt.Sprintf("%s (%s)", n.ID, n.Gossip))
		}
		what := fmt.Sprintf("%d more nodes of the cluster run", len(elsewhere))
		if len(elsewhere) == 1 {
			what = "1 more node of the cluster runs"
		}
		fmt.Fprintf(stderr, "rlnode stop: %s on this host, started with another RLNODE_HOME than %s: %s; stop each with the RLNODE_HOME it started with: RLNODE_HOME=DIR rlnode stop --all\n",
			what, cluster.Home(), strings.Join(names, ", "))
	}
	return code
}

// sameHostElsewhere is the nodes of the clusters of nodes (all of this
// RLNODE_HOME's on this host) that run on this host too but are not among
// them: started with another RLNODE_HOME, so that stop --all, which finds
// nodes by the run files under its own, leaves them running. Drivers of
// rlnode run are not counted: they end with their runs.
func sameHostElsewhere(nodes []cluster.RunInfo) []cluster.NodeStatus {
	ours := map[string]bool{}
	for _, ri := range nodes {
		ours[ri.NodeID] = true
	}
	var out []cluster.NodeStatus
	seen := map[string]bool{}
	for _, ri := range nodes {
		if seen[ri.NodeID] {
			continue // its cluster was asked
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		st, err := cluster.FetchStatus(ctx, ri.Control)
		cancel()
		if err != nil {
			continue // stop says what it can of this node itself
		}
		for _, n := range st.Nodes {
			_, started := n.Labels[jobs.Label] // every rlnode start or join carries it
			if !seen[n.ID] && !ours[n.ID] && started && n.Host != "" && n.Host == actor.HostID() {
				out = append(out, n)
			}
			seen[n.ID] = true
		}
	}
	return out
}

// clearStale removes the run files of the nodes on this host that are gone
// (killed with SIGKILL, or crashed: they could not remove their own), says
// so on w, one line each, and returns them.
func clearStale(cmd string, w io.Writer) []cluster.RunInfo {
	_, all, err := cluster.RunFiles()
	if err != nil {
		return nil
	}
	var gone []cluster.RunInfo
	for _, ri := range all {
		if ri.Gone == "" {
			continue
		}
		gone = append(gone, ri)
		msg := (&cluster.GoneError{Info: ri}).Error()
		if err := cluster.RemoveStale(ri); err != nil {
			fmt.Fprintf(w, "%s: %s; not removed: %v\n", cmd, msg, err)
			continue
		}
		fmt.Fprintf(w, "%s: %s; removed it\n", cmd, msg)
	}
	return gone
}

// parseConnCap parses a --max-conns-per-addr PORT=N of start and join.
func parseConnCap(s string) (string, int, error) {
	port, v, ok := strings.Cut(s, "=")
	if !ok {
		return "", 0, fmt.Errorf("want PORT=N")
	}
	n, err := parseConnsPerAddr(v)
	return port, n, err
}

// parseConnsPerAddr parses a cap on the connections per address: a whole
// number from 1 to cluster.MaxConnsPerAddr.
func parseConnsPerAddr(v string) (int, error) {
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > cluster.MaxConnsPerAddr {
		return 0, fmt.Errorf("%q: want a whole number from 1 to %d", v, cluster.MaxConnsPerAddr)
	}
	return n, nil
}

func processGone(pid int) bool {
	_, err := os.Stat(fmt.Sprintf("/proc/%d", pid))
	return err != nil
}

func dashIfEmpty(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// parseNoArgs parses flags of a command that takes no arguments: -h
// prints the usage and exits 0, a bad flag or an argument exits 2.
func parseNoArgs(fs *flag.FlagSet, args []string) (code int, ok bool) {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0, false
		}
		return 2, false
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(fs.Output(), "%s: unexpected argument %q\n", fs.Name(), fs.Arg(0))
		return 2, false
	}
	return 0, true
}

// detachNode runs this command again without --detach in a new session,
// its output in a log file under Home()/logs, and returns once the node is
// up (its banner, then the log's path) or has failed (its log).
func detachNode(verb string, args []string, keyCreated bool, stdout, stderr io.Writer) int {
	exe, err := os.Executable()
	if err != nil {
		fmt.Fprintf(stderr, "rlnode %s --detach: find this binary: %v\n", verb, err)
		return 1
	}
	child := withoutDetach(args)
	logs := filepath.Join(cluster.Home(), "logs")
	if err := os.MkdirAll(logs, 0o700); err != nil {
		fmt.Fprintf(stderr, "rlnode %s --detach: %v\n", verb, err)
		return 1
	}
	logPath := filepath.Join(logs, fmt.Sprintf("%s-%s-%d.log", verb, time.Now().Format("20060102-150405"), os.Getpid()))
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		fmt.Fprintf(stderr, "rlnode %s --detach: %v\n", verb, err)
		return 1
	}
	defer logFile.Close()
	cmd := exec.Command(exe, append([]string{verb}, child...)...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true} // outlives this terminal
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(stderr, "rlnode %s --detach: start %s: %v\n", verb, exe, err)
		return 1
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); {
		b, _ := os.ReadFile(logPath)
		if head, _, ok := strings.Cut(string(b), "\n"+"others join with:"); ok {
			hint, _, _ := strings.Cut(string(b[len(head)+1:]), "\n")
			banner := upBlock(head)
			if keyCreated {
				// This process created the key; the child found it.
				banner = markKeyCreated(banner)
			}
			fmt.Fprintf(stdout, "%s\n  pid:     %d\n  log:     %s\n%s\nstop it with: rlnode stop --address %s (or rlnode stop --all)\n",
				banner, cmd.Process.Pid, logPath, hint, gossipOf(banner))
			return 0
		}
		select {
		case <-exited:
			// Read the log again: b was read before the node wrote its
			// last words and exited.
			if last, err := os.ReadFile(logPath); err == nil {
				b = last
			}
			fmt.Fprintf(stderr, "rlnode %s --detach: the node exited (log %s):\n%s", verb, logPath, b)
			return 1
		case <-time.After(100 * time.Millisecond):
		}
	}
	fmt.Fprintf(stderr, "rlnode %s --detach: the node was not up after 60s; it runs as pid %d, log %s\n", verb, cmd.Process.Pid, logPath)
	return 1
}

// upBlock is the "node ID is up" block at the end of head, the log of a
// node up to its join hint: the lines the node logged before it (members
// it met while joining) stay in the log.
func upBlock(head string) string {
	if i := strings.LastIndex(head, "\nnode "); i >= 0 {
		return head[i+1:]
	}
	return head
}

// withoutDetach is args without --detach in any of the forms the flag
// package takes (-detach, --detach=1, --detach=TRUE, …): a child given one
// back would detach again, and its child again, without end. Arguments
// after "--" are not flags and are kept.
func withoutDetach(args []string) []string {
	var out []string
	for i, a := range args {
		if a == "--" {
			return append(out, args[i:]...)
		}
		name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if strings.HasPrefix(a, "-") && name == "detach" {
			continue
		}
		out = append(out, a)
	}
	return out
}

// gossipOf finds the gossip address in a node's banner.
func gossipOf(banner string) string {
	for _, line := range strings.Split(banner, "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "gossip:" {
			return f[1]
		}
	}
	return ""
}

// checkJobRecipe checks a submitted job's resolved recipe as rlnode run
// will, on this host.
func checkJobRecipe(src []byte) error {
	l, err := recipes.Parse("job recipe", src, "", nil)
	if err == nil {
		err = train.Check(l)
	}
	return err
}

// resolveJobRecipe reads a recipe submitted as written, from a host
// without a node or with a working dir: a built-in one by name when src
// is empty, else src, named name in its errors, with relative paths
// relative to dir and those of the overrides to setsDir (both "": this
// node's working folder); checked as rlnode run will.
func resolveJobRecipe(name string, src []byte, dir, setsDir string, sets []string) ([]byte, string, error) {
	var l *recipes.Loaded
	var err error
	switch {
	case len(src) == 0 && recipes.IsBuiltin(name):
		l, err = recipes.LoadIn(name, sets, setsDir)
	case len(src) == 0:
		return nil, "", fmt.Errorf("no built-in recipe %q (built-in: %s), and no recipe text came with it", name, strings.Join(recipes.BuiltinNames(), ", "))
	default:
		l, err = recipes.ParseIn(name, src, dir, setsDir, sets)
	}
	if err == nil {
		err = train.Check(l)
	}
	if err != nil {
		return nil, "", err
	}
	var b bytes.Buffer
	if err := l.WriteResolved(&b); err != nil {
		return nil, "", err
	}
	return b.Bytes(), l.Name, nil
}

// remoteControl is what the banner adds to a control endpoint bound to a
// wildcard address: the URL other hosts give rlnode submit, job and
// status, on the address the node advertises for gossip.
func remoteControl(ctrl, gossip string) string {
	host, port, err := net.SplitHostPort(ctrl)
	if err != nil {
		return ""
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsUnspecified() {
		return ""
	}
	adv, _, err := net.SplitHostPort(gossip)
	if err != nil {
		return ""
	}
	return " (from other hosts: --address http://" + net.JoinHostPort(adv, port) + ")"
}

// portTakenHint follows an error that a port is taken with what to do:
// the likely cause is a node started there before (a --detach one the
// user forgot), which rlnode status and rlnode stop find by its address.
func portTakenHint(w io.Writer, flag, addr string, err error) {
	if !errors.Is(err, syscall.EADDRINUSE) {
		return
	}
	if ri, ok := nodeOnPort(addr); ok {
		fmt.Fprintf(w, "node %s already runs there (pid %d): rlnode status --address %s shows it, rlnode stop --address %s stops it; or give %s another port (0 picks a free one)\n",
			ri.NodeID, ri.PID, ri.Gossip, ri.Gossip, flag)
		return
	}
	dir, _, _ := cluster.RunFiles()
	fmt.Fprintf(w, "no node of this RLNODE_HOME (%s) runs there; a node started with another RLNODE_HOME or by another user may (rlnode status with that RLNODE_HOME shows it), or another program holds the port; give %s another port (0 picks a free one)\n",
		dir, flag)
}

// nodeOnPort is the running node of this RLNODE_HOME whose gossip or
// control endpoint is on addr's port: a --bind 0.0.0.0:7946 node's run
// file names the address it advertises, not 0.0.0.0.
func nodeOnPort(addr string) (cluster.RunInfo, bool) {
	_, port, err := net.SplitHostPort(addr)
	if err != nil || port == "0" {
		return cluster.RunInfo{}, false
	}
	_, all, _ := cluster.RunFiles()
	for _, ri := range all {
		if ri.Gone != "" {
			continue
		}
		for _, a := range []string{ri.Gossip, ri.Control} {
			if _, p, err := net.SplitHostPort(a); err == nil && p == port {
				return ri, true
			}
		}
	}
	return cluster.RunInfo{}, false
}

// markKeyCreated adds " (created)" to the banner's key line.
func markKeyCreated(banner string) string {
	lines := strings.Split(banner, "\n")
	for i, l := range lines {
		if strings.HasPrefix(l, "  key:") && !strings.HasSuffix(l, " (created)") {
			lines[i] = l + " (created)"
		}
	}
	return strings.Join(lines, "\n")
}
