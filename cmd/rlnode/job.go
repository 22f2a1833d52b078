package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"
	"unicode"

	"github.com/rlnode/rlnode/cluster"
	"github.com/rlnode/rlnode/jobs"
	"github.com/rlnode/rlnode/recipes"
)

func init() {
	commands["submit"] = submitCommand
	commands["job"] = jobCommand
}

const submitUsage = `usage: rlnode submit RECIPE [--out DIR] [--set KEY.PATH=VALUE]... [--working-dir FOLDER [--exclude PATTERN]...] [--name NAME] [--max-restarts N] [--label k=v]... [--node ID] [--resume] [--no-wait] [--address NODE | --address http://HOST:PORT [--key-file KEY]]

Submits a run of RECIPE (a built-in name or a file) as a job to the cluster a
node on this host belongs to, or, with --address http://HOST:PORT, to the
cluster whose node's control endpoint listens there (a host without a node:
requests are signed with the cluster key, --key-file). A node of the cluster
runs the run's driver (rlnode run --address) for it, so the run goes on when
this terminal or host is gone. When the job's node is lost or stops, another
node takes the job over and continues the run from its newest checkpoint
(--resume): DIR must then be on a filesystem every node sees. The recipe is
checked here first, and again on the node that takes the job; with --address
http://HOST:PORT that node reads it (its relative paths are relative to the
node's working folder) and checks it, and picks DIR without --out. A stopped
job continues with rlnode submit DIR/job-recipe.yaml --resume --out DIR.

With --working-dir FOLDER, the folder (less .git and what --exclude
matches) is packed, sent to the node (once: a node that holds the same
bytes is not sent them again) and unpacked into DIR/working_dir, where the
recipe's relative paths resolve: those of a recipe file inside FOLDER from
its folder's copy, as here, those of --set overrides and of a recipe
outside FOLDER (or a built-in) from FOLDER's root; one that climbs out of
FOLDER is refused, as it would not travel. The cluster then needs none of
the files beforehand; DIR must be new or empty.

Without --no-wait, submit follows the job's log until it ends and exits 0
when it succeeded; Ctrl-C stops following, not the job.

`

func submitCommand(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("rlnode submit", flag.ContinueOnError)
	fs.SetOutput(stderr)
	out := fs.String("out", "", "the run's folder, an absolute path every node can write (default: ./runs/NAME-YYYYMMDD-HHMMSS made absolute here, -2, -3... when taken)")
	name := fs.String("name", "", "the job's name, 1-64 letters, digits, '.', '_', '-' (default: NAME-DATE-TIME-XXXX)")
	maxRestarts := fs.Int("max-restarts", 3, fmt.Sprintf("how many times another node may take the job over after its node was lost or stopped, 0 to %d", jobs.MaxRestartsLimit))
	node := fs.String("node", "", "run the job's driver on this node id")
	noWait := fs.Bool("no-wait", false, "return once the job is submitted")
	resume := fs.Bool("resume", false, "continue the run --out holds from its newest intact checkpoint, or start it over there when it wrote none (rlnode run --continue); without it a folder that holds a run or job is refused")
	addr := fs.String("address", "", "gossip address (or node id) of the node on this host to submit through (default: the only one), or http://HOST:PORT, a node's control endpoint on another host")
	keyFile := fs.String("key-file", defaultKeyFile(), "the cluster key file, to sign requests with --address http://HOST:PORT")
	workingDir := fs.String("working-dir", "", "a folder of this host to send with the job: the recipe's relative paths resolve in its copy on the cluster")
	var sets, labels, excludes repeated
	fs.Var(&sets, "set", "override KEY.PATH=VALUE (repeatable; VALUE is YAML)")
	fs.Var(&labels, "label", "a label k=v the job's node must carry (repeatable)")
	fs.Var(&excludes, "exclude", "leave out of --working-dir what matches PATTERN: a name at any depth (*.ckpt, outputs), or a path from its root with a slash (data/raw) (repeatable; .git always)")
	fs.Usage = func() {
		fmt.Fprint(stderr, submitUsage)
		fs.PrintDefaults()
	}
	pos, code, ok := parseCommand(fs, args)
	if !ok {
		return code
	}
	if len(pos) != 1 {
		fmt.Fprintf(stderr, "rlnode submit: want one recipe (a built-in name or a file)\n\n%s", submitUsage)
		return 2
	}
	if *name != "" {
		if err := jobs.CheckName(*name); err != nil {
			fmt.Fprintf(stderr, "rlnode submit: --name: %v\n", err)
			return 2
		}
	}
	if *resume && *out == "" {
		fmt.Fprintln(stderr, "rlnode submit: --resume needs --out DIR (the run to continue)")
		return 2
	}
	if *workingDir == "" && len(excludes) > 0 {
		fmt.Fprintln(stderr, "rlnode submit: --exclude is for --working-dir")
		return 2
	}
	if *workingDir != "" && *resume {
		fmt.Fprintf(stderr, "rlnode submit: --working-dir with --resume: a run continues with the working dir its folder holds (%s)\n", filepath.Join(*out, jobs.WorkingDirFolder))
		return 2
	}
	if err := jobs.CheckExcludes(excludes); err != nil {
		fmt.Fprintf(stderr, "rlnode submit: %v\n", err)
		return 2
	}
	if *maxRestarts < 0 || *maxRestarts > jobs.MaxRestartsLimit {
		fmt.Fprintf(stderr, "rlnode submit: --max-restarts %d: want 0 to %d\n", *maxRestarts, jobs.MaxRestartsLimit)
		return 2
	}
	want := map[string]string{}
	for _, l := range labels {
		k, v, ok := strings.Cut(l, "=")
		if !ok || k == "" {
			fmt.Fprintf(stderr, "rlnode submit: --label %q: want k=v\n", l)
			return 2
		}
		want[k] = v
	}
	client, nodeID, ok := jobClient("rlnode submit", *addr, *keyFile, stderr)
	if !ok {
		return 1
	}
	remote := client.Key != nil
	req := jobs.SubmitRequest{Name: *name, Out: *out, MaxRestarts: *maxRestarts, Labels: want, Node: *node, Submitter: submitter(), Resume: *resume}
	var err error
	var wd *workingDirUpload
	if *workingDir != "" {
		if wd, err = prepareWorkingDir(*workingDir, excludes, pos[0], sets, &req, stdout); err != nil {
			printRecipeError(stderr, "submit", pos[0], err)
			return 1
		}
		defer wd.remove()
	} else if remote {
		// The node reads the recipe: the files it names are the
		// cluster's, not this host's.
		req.SourceName, req.Sets = pos[0], sets
		if jobs.IsRunRecipe(pos[0], *out, *resume) {
			// The run's own recipe, on the cluster's filesystem: the
			// node reads it (the hints to continue a job name it).
			req.SourceName = filepath.Clean(pos[0])
		} else if !recipes.IsBuiltin(pos[0]) {
			src, err := readRecipeText(pos[0])
			if err != nil {
				fmt.Fprintf(stderr, "rlnode submit: %v\n", err)
				return 1
			}
			req.Source = string(src)
		}
	} else {
		l, err := loadChecked(pos[0], sets)
		if err != nil {
			printRecipeError(stderr, "submit", pos[0], err)
			return 1
		}
		var resolved bytes.Buffer
		if err := l.WriteResolved(&resolved); err != nil {
			fmt.Fprintf(stderr, "rlnode submit: %v\n", err)
			return 1
		}
		req.Recipe, req.RecipeName = resolved.String(), l.Name
	}
	dir := *out
	reserved := false
	switch {
	case remote && dir != "" && !filepath.IsAbs(dir):
		fmt.Fprintf(stderr, "rlnode submit: --out %s: with --address %s, an absolute path on the cluster's filesystem (or none: the node picks runs/NAME-DATE in its working folder)\n", dir, *addr)
		return 2
	case remote:
		// The node picks the folder when none is given: a path of this
		// host means nothing there.
	case dir == "":
		// The default names the second: a job submitted beside another
		// in the same second (a sweep's loop) takes the next free
		// NAME-DATE-N, as rlnode run's default does.
		if dir, err = reserveRunDir(filepath.Join("runs", fmt.Sprintf("%s-%s", req.RecipeName, time.Now().Format("20060102-150405")))); err != nil {
			fmt.Fprintf(stderr, "rlnode submit: %v\n", err)
			return 1
		}
		reserved = true
	}
	if !remote {
		if dir, err = filepath.Abs(dir); err != nil {
			fmt.Fprintf(stderr, "rlnode submit: --out: %v\n", err)
			return 1
		}
	}
	if wd != nil {
		if err := wd.send(client, nodeID, stdout); err != nil {
			fmt.Fprintf(stderr, "rlnode submit: node %s: working dir %s: %v\n", nodeID, *workingDir, err)
			return 1
		}
	}
	// The node reads and checks the recipe (its datasets too) before it
	// answers: that may take it minutes.
	ctx, cancel := context.WithTimeout(context.Background(), jobs.SubmitTime+30*time.Second)
	req.Out = dir
	in, err := client.Submit(ctx, req)
	cancel()
	if err != nil {
		if reserved {
			_ = os.Remove(dir) // only while still empty
		}
		fmt.Fprintf(stderr, "rlnode submit: node %s: %v\n", nodeID, err)
		return 1
	}
	via := addressFlag(*addr, *keyFile)
	fmt.Fprintf(stdout, "job %s submitted: %s on node %s, writing to %s\n", in.Name, in.Recipe, in.Node, in.Out)
	fmt.Fprintf(stdout, "  rlnode job logs %s --follow%s\n  rlnode job stop %s%s\n", in.Name, via, in.Name, via)
	if *noWait {
		return 0
	}
	return followJob(client, nodeID, in.Name, via, 0, stdout, stderr)
}

// readRecipeText reads a recipe file for a node to read
// (recipes.ReadFile).
func readRecipeText(path string) ([]byte, error) {
	b, err := recipes.ReadFile(path)
	switch {
	case errors.Is(err, os.ErrNotExist) && !strings.ContainsAny(path, "/."):
		return nil, fmt.Errorf("recipe %q: no such file, and no built-in recipe by that name (built-in: %s)", path, strings.Join(recipes.BuiltinNames(), ", "))
	case err != nil:
		return nil, fmt.Errorf("recipe: %w", err)
	}
	return b, nil
}

// addressFlag is " --address ADDR" when the command was given one, ""
// else: the commands it prints to run next must ask the same node, or
// they fail where several nodes run on the host. A remote address comes
// with its --key-file (absolute, quoted for the shell) where that is not
// the default.
func addressFlag(addr, keyFile string) string {
	if addr == "" {
		return ""
	}
	if isRemote(addr) && keyFile != defaultKeyFile() {
		// By an absolute path: the command is copied into other
		// terminals, in other folders.
		if abs, err := filepath.Abs(keyFile); err == nil {
			keyFile = abs
		}
		return " --address " + shellQuote(addr) + " --key-file " + shellQuote(keyFile)
	}
	return " --address " + shellQuote(addr)
}

func defaultKeyFile() string { return filepath.Join(cluster.Home(), "cluster.key") }

// isRemote says whether --address names a control endpoint by URL (a
// node on another host) rather than a node on this host.
func isRemote(addr string) bool {
	return strings.HasPrefix(addr, "http://") || strings.HasPrefix(addr, "https://")
}

// controlURL is the HOST:PORT of --address http://HOST:PORT, a node's
// control endpoint on another host.
func controlURL(addr string) (string, error) {
	u, err := url.Parse(addr)
	switch {
	case err != nil:
		return "", fmt.Errorf("--address %s: %v", addr, err)
	case u.Scheme == "https":
		return "", fmt.Errorf("--address %s: a node's control endpoint speaks plain HTTP (requests are signed with the cluster key, not encrypted); to encrypt, tunnel to it (ssh -L 8266:127.0.0.1:PORT HOST) and give --address http://127.0.0.1:8266", addr)
	case u.Host == "" || u.Port() == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.User != nil:
		return "", fmt.Errorf("--address %s: want http://HOST:PORT, a node's control endpoint (rlnode start|join --status-bind HOST:PORT; the node prints it as control:)", addr)
	}
	return u.Host, nil
}

// remoteClient is the client of the control endpoint at addr
// (http://HOST:PORT), signing its requests with the key in keyFile.
func remoteClient(addr, keyFile string) (jobs.Client, error) {
	host, err := controlURL(addr)
	if err != nil {
		return jobs.Client{}, err
	}
	key, _, err := cluster.LoadOrCreateKey(keyFile, false)
	if err != nil {
		return jobs.Client{}, fmt.Errorf("--key-file: %w", err)
	}
	return jobs.Client{Control: host, Key: key, HTTP: &http.Client{Timeout: jobs.SubmitTime + time.Minute}}, nil
}

// submitter is user@host, as a job records who submitted it.
func submitter() string {
	h, _ := os.Hostname()
	if u, err := user.Current(); err == nil {
		return u.Username + "@" + h
	}
	return h
}

// jobClient is the job client of the node on this host that addr names.
func jobClient(cmd, addr, keyFile string, stderr io.Writer) (jobs.Client, string, bool) {
	if isRemote(addr) {
		c, err := remoteClient(addr, keyFile)
		if err != nil {
			fmt.Fprintf(stderr, "%s: %v\n", cmd, err)
			return jobs.Client{}, "", false
		}
		return c, "at " + c.Control, true
	}
	ri, err := findClusterNode(addr)
	if err != nil {
		if !errors.Is(err, cluster.ErrNodeGone) {
			fmt.Fprintf(stderr, "%s: %v\n", cmd, err)
		}
		clearStale(cmd, stderr)
		return jobs.Client{}, "", false
	}
	if ri.Token == "" {
		fmt.Fprintf(stderr, "%s: node %s: its token file (beside %s) is missing or unreadable: jobs need it\n", cmd, ri.NodeID, ri.File)
		return jobs.Client{}, "", false
	}
	return jobs.Client{Control: ri.Control, Token: ri.Token}, ri.NodeID, true
}

// findClusterNode is the node on this host that addr names, as
// cluster.FindRunning finds it; with no address and several nodes here
// (README's cluster on one machine), the first of them when they all
// belong to one cluster: the cluster's status and jobs are the same
// asked of any of its nodes.
func findClusterNode(addr string) (cluster.RunInfo, error) {
	ri, err := cluster.FindRunning(addr)
	var several *cluster.SeveralNodesError
	if addr != "" || !errors.As(err, &several) {
		return ri, err
	}
	first := several.Nodes[0]
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, serr := cluster.FetchStatus(ctx, first.Control)
	if serr != nil {
		return ri, fmt.Errorf("%w (node %s does not answer: %v)", err, first.NodeID, serr)
	}
	members := map[string]bool{}
	for _, n := range st.Nodes {
		members[n.ID] = true
	}
	var apart []string
	for _, o := range several.Nodes[1:] {
		if !members[o.NodeID] {
			apart = append(apart, o.NodeID)
		}
	}
	if len(apart) > 0 {
		return ri, fmt.Errorf("%w: they are not all of one cluster (node %s's cluster lacks %s)", err, first.NodeID, strings.Join(apart, ", "))
	}
	return first, nil
}

// followJob prints the job's log from offset, asked of node nodeID
// through c, until the job has ended and its log is read; Ctrl-C stops
// following. via (addressFlag) goes into the commands it suggests. It
// returns 0 when the job succeeded.
func followJob(c jobs.Client, nodeID, name, via string, offset int64, stdout, stderr io.Writer) int {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	quiet := 0 // failed reads in a row while the job moves between nodes
	// A client signing its requests polls more slowly: each request's
	// nonce is kept by the node for the signature's window (ctlsign), and
	// a follower at 2 a second would hold 1,200 of its 100,000; at one
	// each 2 s, about 330 followers fill it.
	idle := 500 * time.Millisecond
	if c.Key != nil {
		idle = 2 * time.Second
	}
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		data, next, status, err := c.Log(ctx, name, offset)
		cancel()
		if err != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			in, gerr := c.Get(ctx, name)
			cancel()
			if gerr != nil {
				// The node asked is gone (stopped, say): the job is not.
				fmt.Fprintf(stderr, "rlnode job: %s: node %s (control endpoint %s) no longer answers: %v\nrlnode job: the job goes on where it runs: rlnode job logs %s --follow through another node of the cluster\n",
					name, nodeID, c.Control, gerr, name)
				return 1
			}
			if !jobs.Active(in.Status) || quiet > 120 {
				fmt.Fprintf(stderr, "rlnode job: %s (%s): log, asked of node %s: %v\n", name, in.Status, nodeID, err)
				return 1
			}
			quiet++
			status = in.Status
		} else {
			quiet = 0
			_, _ = stdout.Write(data)
			offset = next
		}
		// More may be waiting; a signing client reads on at once only
		// after a full read (a chatty log must not cost a nonce each
		// 100 ms), else at its pace.
		if len(data) > 0 && (c.Key == nil || len(data) >= jobs.MaxLogRead) {
			continue
		}
		if !jobs.Active(status) && err == nil {
			return endOfJob(c, name, via, stdout)
		}
		select {
		case <-sigs:
			fmt.Fprintf(stderr, "\nrlnode job: stopped following; job %s goes on (rlnode job logs %s --follow%s, rlnode job stop %s%s)\n", name, name, via, name, via)
			return 130
		case <-time.After(idle):
		}
	}
}

// endOfJob prints how the job ended and is 0 when it succeeded; a
// stopped job's line says how to continue it, through the node asked
// (via, as addressFlag).
func endOfJob(c jobs.Client, name, via string, stdout io.Writer) int {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	in, err := c.Get(ctx, name)
	if err != nil {
		fmt.Fprintf(stdout, "job %s: %v\n", name, err)
		return 1
	}
	fmt.Fprintf(stdout, "job %s %s: %s\n", name, in.Status, printable(in.Cause))
	if in.Status == jobs.Stopped && filepath.IsAbs(in.Out) {
		fmt.Fprintf(stdout, "continue it with: rlnode submit %s --resume --out %s%s\n", shellQuote(filepath.Join(in.Out, jobs.RecipeFile)), shellQuote(in.Out), via)
	}
	if in.Status == jobs.Succeeded {
		return 0
	}
	return 1
}

const jobUsage = `usage: rlnode job list [--json] [--address NODE]
       rlnode job status NAME [--json] [--address NODE]
       rlnode job logs NAME [--follow] [--address NODE]
       rlnode job stop NAME [--now] [--address NODE]
       rlnode job delete NAME... | --ended [--address NODE]

Lists and follows the jobs rlnode submit started, asked of a node on this host,
or with --address http://HOST:PORT [--key-file KEY] of the node whose control
endpoint listens there (requests signed with the cluster key).
A job's status is RUNNING, PENDING (its run found no room the cluster could
give once others release it; it starts again when room frees), RESTARTING (its
node was lost or stopped; another node takes it over), SUCCEEDED, FAILED or
STOPPED; an ended job is kept for
7 days. stop asks the job's run to stop after its current step, which it
checkpoints (--now kills it at once). Every line of a job's drivers goes to its
log, RUN/job.log in the run's folder. delete forgets ended jobs (or, with
--ended, every ended job) at once, instead of 7 days on: they leave every list
and the cluster's bound of 1,000 jobs and 8 MiB of their recipes; their run
folders, logs included, stay.

`

// jobVerbOf is the job subcommand for the words other tools use for it
// (Ray's, Slurm's, the shell's).
var jobVerbOf = map[string]string{
	"cancel": "stop", "kill": "stop --now", "scancel": "stop",
	"ls": "list", "ps": "list", "log": "logs", "tail": "logs --follow",
	"show": "status", "info": "status", "rm": "delete", "remove": "delete",
}

func jobCommand(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stdout, jobUsage)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	verb := args[0]
	fs := flag.NewFlagSet("rlnode job "+verb, flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("address", "", "gossip address (or node id) of the node on this host to ask (default: the only one), or http://HOST:PORT, a node's control endpoint on another host")
	keyFile := fs.String("key-file", defaultKeyFile(), "the cluster key file, to sign requests with --address http://HOST:PORT")
	asJSON, follow, now, allEnded := new(bool), new(bool), new(bool), new(bool)
	wantName := true
	switch verb {
	case "list":
		asJSON = fs.Bool("json", false, "print JSON")
		wantName = false
	case "status":
		asJSON = fs.Bool("json", false, "print JSON")
	case "logs":
		follow = fs.Bool("follow", false, "go on printing until the job ends")
	case "stop":
		now = fs.Bool("now", false, "kill the run's driver at once, not after its current step")
	case "delete":
		allEnded = fs.Bool("ended", false, "delete every ended job (SUCCEEDED, FAILED, STOPPED)")
		wantName = false
	default:
		hint := ""
		if v, ok := jobVerbOf[verb]; ok {
			hint = fmt.Sprintf(" (rlnode job %s does that)", v)
		}
		fmt.Fprintf(stderr, "rlnode job: unknown subcommand %q%s\n\n%s", verb, hint, jobUsage)
		return 2
	}
	fs.Usage = func() {
		fmt.Fprint(stderr, jobUsage)
		fs.PrintDefaults()
	}
	pos, code, ok := parseCommand(fs, args[1:])
	if !ok {
		return code
	}
	cmd := "rlnode job " + verb
	switch {
	case wantName && len(pos) != 1:
		fmt.Fprintf(stderr, "%s: want one job name\n", cmd)
		return 2
	case verb == "delete" && (len(pos) == 0) == !*allEnded:
		fmt.Fprintf(stderr, "%s: want job names, or --ended\n", cmd)
		return 2
	case !wantName && verb != "delete" && len(pos) != 0:
		fmt.Fprintf(stderr, "%s: unexpected argument %q\n", cmd, pos[0])
		return 2
	}
	if verb == "delete" {
		for _, name := range pos {
			if err := jobs.CheckName(name); err != nil {
				fmt.Fprintf(stderr, "%s: %v\n", cmd, err)
				return 2
			}
		}
	}
	if wantName {
		if err := jobs.CheckName(pos[0]); err != nil {
			fmt.Fprintf(stderr, "%s: %v\n", cmd, err)
			return 2
		}
	}
	c, nodeID, ok := jobClient(cmd, *addr, *keyFile, stderr)
	if !ok {
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	fail := func(err error) int {
		fmt.Fprintf(stderr, "%s: node %s: %v\n", cmd, nodeID, err)
		return 1
	}
	switch verb {
	case "delete":
		cancel()
		return deleteJobs(c, nodeID, pos, *allEnded, stdout, stderr)
	case "list":
		list, err := c.List(ctx)
		if err != nil {
			return fail(err)
		}
		if *asJSON {
			return printJSON(stdout, list)
		}
		printJobs(stdout, list)
		printPending(stdout, list)
	case "status":
		in, err := c.Get(ctx, pos[0])
		if err != nil {
			return fail(err)
		}
		if *asJSON {
			return printJSON(stdout, in)
		}
		printJobs(stdout, []jobs.Info{in})
		if in.Cause != "" {
			fmt.Fprintf(stdout, "\n%s\n", printable(in.Cause))
		}
	case "logs":
		if *follow {
			cancel()
			return followJob(c, nodeID, pos[0], addressFlag(*addr, *keyFile), 0, stdout, stderr)
		}
		// The log as it is now: read up to the size the first read saw
		// (a running job's log grows meanwhile: --follow goes on), each
		// read within its own 30 s.
		cancel()
		var off int64
		end := int64(-1)
		for end < 0 || off < end {
			rctx, rcancel := context.WithTimeout(context.Background(), 30*time.Second)
			p, err := c.LogPart(rctx, pos[0], off)
			rcancel()
			if err != nil {
				return fail(err)
			}
			if end < 0 {
				end = p.Size
			}
			_, _ = stdout.Write(p.Data)
			if len(p.Data) == 0 {
				break
			}
			off = p.Next
		}
	case "stop":
		if err := c.Stop(ctx, pos[0], *now); err != nil {
			return fail(err)
		}
		if *now {
			fmt.Fprintf(stdout, "job %s: its driver is killed; rlnode job status %s%s shows it STOPPED\n", pos[0], pos[0], addressFlag(*addr, *keyFile))
		} else {
			fmt.Fprintf(stdout, "job %s: asked its run to stop after the current step, which it checkpoints; rlnode job status %s%s shows when it has\n", pos[0], pos[0], addressFlag(*addr, *keyFile))
		}
	}
	return 0
}

func printJSON(w io.Writer, v any) int {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
	return 0
}

func printJobs(w io.Writer, list []jobs.Info) {
	if len(list) == 0 {
		fmt.Fprintln(w, "no jobs")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tSTATUS\tNODE\tRESTARTS\tSUBMITTED\tRECIPE\tOUT")
	for _, in := range list {
		sub := "-"
		if in.SubmittedMs > 0 {
			sub = time.UnixMilli(in.SubmittedMs).Format("2006-01-02 15:04:05")
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d/%d\t%s\t%s\t%s\n", in.Name, in.Status, dashIfEmpty(in.Node), in.Restarts, in.MaxRestarts, sub, printable(in.Recipe), printable(in.Out))
	}
	tw.Flush()
}

// printPending says under the list what each PENDING job waits for:
// the table alone showed PENDING, and what it lacked took a job status
// per job.
func printPending(w io.Writer, list []jobs.Info) {
	sep := "\n" // a blank line after the table
	for _, in := range list {
		if in.Status == jobs.Pending && in.Cause != "" {
			fmt.Fprintf(w, "%s%s PENDING: %s\n", sep, in.Name, printable(in.Cause))
			sep = ""
		}
	}
}

// printable is s with its control characters written as Go escapes
// (\n, \x1b): a recipe's name or folder, or a driver's last line, comes
// from whoever submitted the job, and is printed in other users'
// terminals, where an escape sequence would drive the terminal.
func printable(s string) string {
	if strings.IndexFunc(s, unicode.IsControl) < 0 {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		if unicode.IsControl(r) {
			q := strconv.QuoteRune(r)
			b.WriteString(q[1 : len(q)-1])
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// deleteJobs forgets the named jobs, or every ended one, each asked of
// node nodeID through c within 30 s; it returns 1 when any was refused.
func deleteJobs(c jobs.Client, nodeID string, names []string, allEnded bool, stdout, stderr io.Writer) int {
	if allEnded {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		list, err := c.List(ctx)
		cancel()
		if err != nil {
			fmt.Fprintf(stderr, "rlnode job delete: node %s: %v\n", nodeID, err)
			return 1
		}
		for _, in := range list {
			if !jobs.Active(in.Status) {
				names = append(names, in.Name)
			}
		}
		if len(names) == 0 {
			fmt.Fprintln(stdout, "no ended jobs")
			return 0
		}
	}
	code := 0
	for _, name := range names {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		in, err := c.Delete(ctx, name)
		cancel()
		if err != nil {
			fmt.Fprintf(stderr, "rlnode job delete: %s: %v\n", name, err)
			code = 1
			continue
		}
		fmt.Fprintf(stdout, "job %s (%s) deleted; its run folder %s stays\n", in.Name, in.Status, printable(in.Out))
	}
	return code
}
