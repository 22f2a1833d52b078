package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"strconv"
	"syscall"

	"github.com/rlnode/rlnode/cluster"
	"github.com/rlnode/rlnode/dashboard"
)

func init() { commands["dashboard"] = dashboardCommand }

const dashboardUsage = `usage: rlnode dashboard [--bind HOST:PORT] [--runs DIR]... [--traces DIR]... [--address HOST:PORT | http://HOST:PORT] [--max-conns-per-addr N]

Serves pages for a browser until interrupted: the cluster (nodes, actors,
jobs, placement groups) as a node running on this host sees it (or, with
--address http://HOST:PORT, the node whose control endpoint listens there
on another host), and the runs in
the --runs folders (each a run folder, or holding run folders up to two
levels down): status, step and ETA, charts of metrics.jsonl with runs
overlaid, the recipe differences between runs; the traces of the --traces
stores and of each run's traces/ folder (search, span trees, stats), and
each run's recorded episodes. Read-only. Bound beyond
loopback, it asks for the control token of a node on this host.

`

func dashboardCommand(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("rlnode dashboard", flag.ContinueOnError)
	fs.SetOutput(stderr)
	bind := fs.String("bind", "127.0.0.1:8265", "address HOST:PORT to serve on (loopback unless told otherwise; port 0 picks a free one)")
	address := fs.String("address", "", "gossip address (or node id) of the node on this host to ask for the cluster's status (default: any that answers), or http://HOST:PORT, a node's control endpoint on another host")
	connsPerAddr := fs.Int("max-conns-per-addr", dashboard.DefaultConnsPerAddr, fmt.Sprintf("connections one client address (an IPv6 one with its /64, so hosts sharing a /64 share it) may hold open; more are closed at once (1 to %d)", cluster.MaxConnsPerAddr))
	var runs repeated
	fs.Var(&runs, "runs", "folder of runs, or one run folder (repeatable; default: the current folder)")
	var stores repeated
	fs.Var(&stores, "traces", "trace store folder to show besides each run's traces/ (repeatable)")
	fs.Usage = func() {
		fmt.Fprint(stderr, dashboardUsage)
		fs.PrintDefaults()
	}
	if code, ok := parseNoArgs(fs, args); !ok {
		return code
	}
	if _, err := parseConnsPerAddr(strconv.Itoa(*connsPerAddr)); err != nil {
		fmt.Fprintf(stderr, "rlnode dashboard: --max-conns-per-addr %v\n", err)
		return 2
	}
	if len(runs) == 0 {
		runs = repeated{"."}
	}
	for _, d := range runs {
		if fi, err := os.Stat(d); err != nil || !fi.IsDir() {
			fmt.Fprintf(stderr, "rlnode dashboard: --runs %s: not a folder\n", d)
			return 2
		}
	}
	for _, d := range stores {
		if fi, err := os.Stat(d); err != nil || !fi.IsDir() {
			fmt.Fprintf(stderr, "rlnode dashboard: --traces %s: not a folder\n", d)
			return 2
		}
	}
	var src dashboard.StatusSource = dashboard.HostNodes{Address: *address}
	if isRemote(*address) {
		host, err := controlURL(*address)
		if err != nil {
			fmt.Fprintf(stderr, "rlnode dashboard: %v\n", err)
			return 2
		}
		src = dashboard.RemoteNode{Control: host}
	}
	cfg := dashboard.Config{Cluster: src, RunDirs: runs, TraceDirs: stores,
		Log: slog.New(slog.NewTextHandler(stderr, nil)), ConnsPerAddr: *connsPerAddr}
	if !loopbackBind(*bind) {
		// The token of a node on this host guards a dashboard others can reach.
		if ri, err := cluster.FindRunning(*address); err == nil {
			cfg.Token = ri.Token
		} else if _, infos, err := cluster.Running(); err == nil && len(infos) > 0 {
			cfg.Token = infos[0].Token
		}
	}
	srv, err := dashboard.Serve(*bind, cfg)
	if err != nil {
		fmt.Fprintf(stderr, "rlnode dashboard: %v\n", err)
		return 1
	}
	defer srv.Close()
	fmt.Fprintf(stdout, "dashboard: %s\n", srv.URL)
	if cfg.Token != "" {
		fmt.Fprintf(stdout, "open it once as %s?token=%s (the control token of a node on this host)\n", srv.URL, cfg.Token)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	<-ctx.Done()
	return 0
}

// addrReason is what is wrong with an address net.SplitHostPort refused,
// without the address, which the caller names already.
func addrReason(err error) error {
	var ae *net.AddrError
	if errors.As(err, &ae) {
		return errors.New(ae.Err)
	}
	return err
}

// loopbackBind says whether a HOST:PORT to listen on is a loopback
// address (or localhost).
func loopbackBind(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}

// dashboardFlag is --dashboard on node commands: alone it means the
// default address, --dashboard=HOST:PORT another. A bad address is kept in
// err for the command to report after parsing: the flag package words
// any error of a boolean flag's Set as "invalid boolean value".
type dashboardFlag struct {
	addr string
	err  error
}

func (d *dashboardFlag) String() string   { return d.addr }
func (d *dashboardFlag) IsBoolFlag() bool { return true }
func (d *dashboardFlag) Set(v string) error {
	switch v {
	case "true":
		d.addr = "127.0.0.1:8265"
	case "false":
		d.addr = ""
	default:
		d.addr = v
		if _, _, err := net.SplitHostPort(v); err != nil {
			d.err = fmt.Errorf("--dashboard=%s: want HOST:PORT (%v)", v, addrReason(err))
		}
	}
	return nil
}

// serveNodeDashboard serves the dashboard of a node in this process,
// guarded beyond loopback by the node's control token.
func serveNodeDashboard(node *cluster.Node, addr string, runs, stores []string, connsPerAddr int) (*dashboard.Server, error) {
	if len(runs) == 0 {
		runs = []string{"."}
	}
	cfg := dashboard.Config{Cluster: dashboard.LocalNode{Node: node}, RunDirs: runs, TraceDirs: stores,
		Log: node.System().Logger(), ConnsPerAddr: connsPerAddr}
	if ri, err := cluster.FindRunning(node.ID()); err == nil {
		cfg.Token = ri.Token
	}
	srv, err := dashboard.Serve(addr, cfg)
	if err != nil {
		return nil, fmt.Errorf("dashboard: %w", err)
	}
	return srv, nil
}
