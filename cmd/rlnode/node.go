package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
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
)

func init() {
	commands["start"] = func(args []string, stdout, stderr io.Writer) int { return nodeCommand("start", args, stdout, stderr) }
	commands["join"] = func(args []string, stdout, stderr io.Writer) int { return nodeCommand("join", args, stdout, stderr) }
	commands["status"] = statusCommand
	commands["stop"] = stopCommand
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
	nodeID := fs.String("node-id", "", "node id (default: hostname plus a random suffix)")
	control := fs.String("status-bind", "127.0.0.1:0", "control endpoint for `rlnode status` and `rlnode stop` (loopback unless told otherwise)")
	tlsCert := fs.String("tls-cert", "", "PEM certificate for the actor transport (mutual TLS)")
	tlsKey := fs.String("tls-key", "", "PEM private key for --tls-cert")
	tlsCA := fs.String("tls-ca", "", "PEM CA that signed every node's certificate")
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
	var labels, resources repeated
	fs.Var(&labels, "label", "node label k=v (repeatable)")
	fs.Var(&resources, "resource", "custom resource NAME=AMOUNT (repeatable)")
	fs.Usage = func() {
		if verb == "start" {
			fmt.Fprintf(stderr, "usage: rlnode start [flags]\n\nStarts the first node of a cluster and runs it in the foreground.\n\n")
		} else {
			fmt.Fprintf(stderr, "usage: rlnode join HOST:PORT [flags]\n\nJoins the cluster a member at HOST:PORT (its gossip address) belongs to.\n\n")
		}
		fs.PrintDefaults()
	}
	// Accept the join address before or after the flags.
	var positional []string
	rest := args
	for {
		if err := fs.Parse(rest); err != nil {
			return 2
		}
		if fs.NArg() == 0 {
			break
		}
		positional = append(positional, fs.Arg(0))
		rest = fs.Args()[1:]
	}
	cfg := cluster.Config{Bind: *bind, Advertise: *advertise, ActorBind: *actorBind, CPUs: *cpus, NodeID: *nodeID}
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
	cfg.Labels = map[string]string{}
	for _, l := range labels {
		k, v, ok := strings.Cut(l, "=")
		if !ok || k == "" {
			fmt.Fprintf(stderr, "rlnode %s: --label %q: want k=v\n", verb, l)
			return 2
		}
		cfg.Labels[k] = v
	}
	res, err := cluster.ParseResources(strings.Join(resources, ","))
	if err != nil {
		fmt.Fprintf(stderr, "rlnode %s: --resource: %v\n", verb, err)
		return 2
	}
	cfg.Resources = res
	if *tlsCert != "" || *tlsKey != "" || *tlsCA != "" {
		if *tlsCert == "" || *tlsKey == "" || *tlsCA == "" {
			fmt.Fprintf(stderr, "rlnode %s: TLS needs all of --tls-cert, --tls-key and --tls-ca\n", verb)
			return 2
		}
		cfg.TLS = &actor.TLSFiles{CertFile: *tlsCert, KeyFile: *tlsKey, CAFile: *tlsCA}
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		fmt.Fprintf(stderr, "rlnode %s: --log-level %q: %v\n", verb, *logLevel, err)
		return 2
	}
	cfg.Logger = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))

	key, created, err := cluster.LoadOrCreateKey(*keyFile, verb == "start")
	if err != nil {
		fmt.Fprintf(stderr, "rlnode %s: %v\n", verb, err)
		if verb == "join" {
			fmt.Fprintln(stderr, "copy the key file from the first node (rlnode start prints its path)")
		}
		return 1
	}
	cfg.Key = key

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	node, err := cluster.Start(ctx, cfg)
	if err != nil {
		fmt.Fprintf(stderr, "rlnode %s: %v\n", verb, err)
		return 1
	}
	ctrl, closeCtrl, err := node.ServeControl(*control)
	if err != nil {
		node.Stop()
		fmt.Fprintf(stderr, "rlnode %s: %v\n", verb, err)
		return 1
	}
	defer closeCtrl()
	keyNote := ""
	if created {
		keyNote = " (created)"
	}
	fmt.Fprintf(stdout, "node %s is up\n  gossip:  %s\n  actors:  %s\n  control: %s\n  key:     %s%s\n",
		node.ID(), node.GossipAddress(), node.ActorAddress(), ctrl, *keyFile, keyNote)
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

func statusCommand(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("rlnode status", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("address", "", "gossip address (or node id) of a node running on this host")
	asJSON := fs.Bool("json", false, "print JSON with top-level arrays nodes and actors")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	ri, err := cluster.FindRunning(*addr)
	if err != nil {
		fmt.Fprintf(stderr, "rlnode status: %v\n", err)
		return 1
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

func printStatus(w io.Writer, st cluster.Status) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "NODE\tSTATE\tGOSSIP\tACTORS\tCPU (free/total)\tGPU (free/total)\tLABELS\tUPTIME\n")
	for _, n := range st.Nodes {
		var labels []string
		for k, v := range n.Labels {
			labels = append(labels, k+"="+v)
		}
		sort.Strings(labels)
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%g/%g\t%g/%g\t%s\t%s\n", n.ID, n.State, n.Gossip, n.Actor,
			n.Free[cluster.CPU], n.Total[cluster.CPU], n.Free[cluster.GPU], n.Total[cluster.GPU],
			strings.Join(labels, ","), time.Duration(n.UptimeS*float64(time.Second)))
	}
	tw.Flush()
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "ACTOR\tKIND\tNODE\tSTATE\tRESTARTS\tDEATH CAUSE\n")
	for _, a := range st.Actors {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\n", a.Name, a.Kind, a.Node, a.State, a.Restarts, a.Cause)
	}
	tw.Flush()
	if len(st.Groups) > 0 {
		fmt.Fprintln(w)
		for _, g := range st.Groups {
			fmt.Fprintf(w, "placement group %s %s on %s\n", g.ID, g.Strategy, strings.Join(g.Nodes, ","))
		}
	}
}

func stopCommand(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("rlnode stop", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("address", "", "gossip address (or node id) of the node to stop, on this host")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	ri, err := cluster.FindRunning(*addr)
	if err != nil {
		fmt.Fprintf(stderr, "rlnode stop: %v\n", err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := cluster.RequestStop(ctx, ri.Control, ri.Token); err != nil {
		fmt.Fprintf(stderr, "rlnode stop: node %s: %v\n", ri.NodeID, err)
		return 1
	}
	// Wait for the process to leave, bounded.
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", ri.PID)); err != nil {
			fmt.Fprintf(stdout, "node %s stopped\n", ri.NodeID)
			return 0
		}
	}
	fmt.Fprintf(stderr, "rlnode stop: node %s (pid %d) asked to stop but still running after 15s\n", ri.NodeID, ri.PID)
	return 1
}
