package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"text/template"
	"time"

	"github.com/rlnode/rlnode/cluster"
	"github.com/rlnode/rlnode/recipes"
)

func init() { commands["sbatch"] = sbatchCommand }

const sbatchUsage = `usage: rlnode sbatch RECIPE --nodes N --gpus-per-node G [flags]
       rlnode sbatch --serve --nodes N --gpus-per-node G [flags]

Validates RECIPE (a built-in name or a file) and prints a Slurm batch script
that runs it on N nodes: 'rlnode start' on the first node of the allocation,
'rlnode join' on the others through srun (GPUs as Slurm assigned them:
SLURM_GPUS_ON_NODE, else CUDA_VISIBLE_DEVICES), a wait (bounded) until all N
nodes are up, 'rlnode run RECIPE --driver-only' (its process offers nothing:
the first node offers that host already), and a clean shutdown on exit,
error, scancel or the time limit. Submit it with: rlnode sbatch ... > job.sh && sbatch job.sh

The run directory (--out) must be on a filesystem every node sees (as home
directories usually are): the cluster key file is shared through it. Set
RLNODE_ADVERTISE in the job's environment when nodes must talk over an
address other than the one routing to the first node.

With --serve (no RECIPE) the allocation serves jobs instead of running one
recipe: the first node's control endpoint listens on its address
(--control-port), the script writes that URL and the key file's path to
--address-file (mode 0600) and prints the 'rlnode submit RECIPE --address
http://HOST:PORT --key-file KEY' line to use from the login host, and keeps
the cluster up until scancel or the time limit. At the time limit, or at
'scancel --batch --signal=TERM JOBID', it removes the address file, asks every
running or pending job to stop after its current step, which it checkpoints
(rlnode submit RUN/job-recipe.yaml --resume --out RUN continues it in another
allocation), and stops every node; a plain scancel signals every process at
once, and a job may lose its last step.

flags:
`

// sbatchOptions are what the batch script is made from.
type sbatchOptions struct {
	Serve        bool     // no recipe: keep the cluster up and serve jobs submitted to it
	ControlPort  int      // --serve: the first node's control endpoint port; 0 picks a free one
	AddressFile  string   // --serve: where the script writes the control URL and key path ("" is the default beside the job's output; %j is the job id)
	Recipe       string   // a built-in name, or the recipe file's absolute path
	Resolved     string   // a file recipe resolved (every default, absolute paths): the script carries it
	RecipeName   string   // the recipe's name
	Sets         []string // --set overrides for rlnode run
	Nodes        int
	GPUsPerNode  int
	Partition    string
	Time         string
	Account      string
	CPUsPerTask  int    // 0: Slurm's default (clusters that allocate by core give 1)
	Mem          string // memory per node, Slurm's format; "" is Slurm's default
	Exclusive    bool
	JobName      string
	Out          string // run directory; "" is $SLURM_SUBMIT_DIR/rlnode-$SLURM_JOB_ID
	Rlnode       string // the rlnode binary every node runs
	RunCmd       string // replaces 'rlnode run ...' (shell text)
	Port         int    // gossip port of the first node; 0 picks a free one
	Detection    string // every node's --detection; "fast" (the default) is left off the command lines
	VLLM         string // every node's --vllm command ("" none): set when the recipe launches vLLM servers
	WaitTimeout  time.Duration
	StopTimeout  time.Duration
	GeneratedCmd string   // the command line that made the script, for its header
	Warnings     []string // what check found doubtful but not wrong
}

var slurmMem = regexp.MustCompile(`^\d+[KMGTkmgt]?$`)

var slurmTime = regexp.MustCompile(`^(\d+|\d+:\d{2}|\d+:\d{2}:\d{2}|\d+-\d+|\d+-\d+:\d{2}|\d+-\d+:\d{2}:\d{2}|infinite|unlimited|UNLIMITED)$`)

func sbatchCommand(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("rlnode sbatch", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, sbatchUsage)
		fs.PrintDefaults()
	}
	var o sbatchOptions
	var sets repeated
	fs.IntVar(&o.Nodes, "nodes", 0, "nodes to allocate (required, ≥ 1)")
	fs.IntVar(&o.GPUsPerNode, "gpus-per-node", -1, "GPUs per node (required; 0 for CPU-only nodes)")
	fs.StringVar(&o.Partition, "partition", "", "Slurm partition")
	fs.StringVar(&o.Time, "time", "", "time limit (Slurm's format: MM, HH:MM:SS, D-HH:MM...)")
	fs.StringVar(&o.Account, "account", "", "Slurm account")
	fs.IntVar(&o.CPUsPerTask, "cpus-per-task", 0, "CPUs for each node's rlnode process, which offers them to the recipe's actors (0: Slurm's default, 1 CPU on clusters that allocate by core)")
	fs.StringVar(&o.Mem, "mem", "", "memory per node (Slurm's format: 64G, 500M; 0 for all of it)")
	fs.BoolVar(&o.Exclusive, "exclusive", false, "whole nodes: share them with no other job")
	fs.StringVar(&o.JobName, "job-name", "", "Slurm job name (default rlnode-RECIPE)")
	fs.StringVar(&o.Out, "out", "", "run directory, on a filesystem all nodes see (default $SLURM_SUBMIT_DIR/rlnode-$SLURM_JOB_ID)")
	fs.StringVar(&o.Rlnode, "rlnode", "", "path of the rlnode binary on the nodes (default: this binary)")
	fs.StringVar(&o.RunCmd, "run-cmd", "", "shell command run on the first node instead of 'rlnode run RECIPE' once all nodes are up;\n"+
		"it sees $RLNODE (the binary), $RLNODE_GOSSIP (the first node's gossip address), $RLNODE_KEY, $NODE_IP (the first node's address), $RLNODE_OUT and $RLNODE_NODES.\n"+
		"e.g. --run-cmd '\"$RLNODE\" status --json' for a smoke test of the allocation")
	fs.IntVar(&o.Port, "port", 0, "gossip port of the first node (0 picks a free one)")
	fs.StringVar(&o.Detection, "detection", "fast", "failure detection of every node and the driver: fast or lan (see rlnode start -h)")
	fs.StringVar(&o.VLLM, "vllm", "", "the command every node starts a run's vLLM servers with (engines.*.vllm.launch), e.g. \"/opt/venv/bin/vllm serve\" (default: vllm serve when the recipe launches servers, else none)")
	fs.DurationVar(&o.WaitTimeout, "wait-timeout", 5*time.Minute, "how long the job waits for all nodes to be up")
	fs.DurationVar(&o.StopTimeout, "stop-timeout", 30*time.Second, "how long shutdown waits for each step before killing it")
	fs.Var(&sets, "set", "recipe override KEY.PATH=VALUE (repeatable), checked now and passed to rlnode run")
	fs.BoolVar(&o.Serve, "serve", false, "no RECIPE: keep the cluster up until scancel or the time limit and serve jobs\n"+
		"submitted to it from the login host (rlnode submit RECIPE --address http://HOST:PORT --key-file KEY, as the job's output and --address-file say)")
	fs.IntVar(&o.ControlPort, "control-port", 8266, "with --serve: port of the first node's control endpoint, on its address, where jobs are submitted (0 picks a free one)")
	fs.StringVar(&o.AddressFile, "address-file", "", "with --serve: file the job writes the control endpoint's URL (first line) and the cluster key file's path (second line) to, mode 0600,\n"+
		"removed when the job ends; %j is the job id (default $SLURM_SUBMIT_DIR/rlnode-%j.address)")
	pos, code, ok := parseCommand(fs, args)
	if !ok {
		return code
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	o.Sets = sets
	o.GeneratedCmd = "rlnode sbatch " + shellJoin(args)
	if o.Serve {
		return sbatchServe(o, pos, given, stdout, stderr)
	}
	for _, f := range []string{"control-port", "address-file"} {
		if given[f] {
			fmt.Fprintf(stderr, "rlnode sbatch: --%s: only with --serve (a job that serves jobs submitted to it)\n", f)
			return 2
		}
	}
	if len(pos) != 1 {
		fmt.Fprintf(stderr, "rlnode sbatch: want one recipe (a built-in name or a file), got %d arguments (or --serve, to serve jobs submitted to the allocation)\n", len(pos))
		return 2
	}
	l, err := loadChecked(pos[0], sets)
	if err != nil {
		if errors.Is(err, recipes.ErrInvalid) {
			fmt.Fprintf(stderr, "%v\nrlnode sbatch: recipe %s is invalid; no script written\n", err, pos[0])
		} else {
			fmt.Fprintf(stderr, "rlnode sbatch: %v\n", err)
		}
		return 1
	}
	o.RecipeName = l.Name
	o.Recipe = pos[0]
	if _, _, builtin := recipes.BuiltinSource(pos[0]); !builtin {
		// The job runs what was validated, wherever the file lives and
		// whatever happens to it before the job starts.
		if o.Recipe, err = filepath.Abs(pos[0]); err != nil {
			fmt.Fprintf(stderr, "rlnode sbatch: %v\n", err)
			return 1
		}
		var b strings.Builder
		if err := l.WriteResolved(&b); err != nil {
			fmt.Fprintf(stderr, "rlnode sbatch: %v\n", err)
			return 1
		}
		o.Resolved = b.String()
	}
	return writeSbatch(o, l.Recipe, stdout, stderr)
}

// sbatchServe writes the script of an allocation that serves jobs: no
// recipe, nothing that only a recipe's run would use.
func sbatchServe(o sbatchOptions, pos []string, given map[string]bool, stdout, stderr io.Writer) int {
	var errs []string
	if len(pos) > 0 {
		errs = append(errs, fmt.Sprintf("--serve takes no recipe (got %q): the allocation runs the jobs submitted to it, each with its recipe (rlnode submit RECIPE --address ...)", pos[0]))
	}
	if given["run-cmd"] {
		errs = append(errs, "--serve and --run-cmd: pick one (--serve keeps the cluster up for jobs; --run-cmd runs one command and ends the job)")
	}
	if given["set"] {
		errs = append(errs, "--set with --serve: there is no recipe to override; give --set to rlnode submit")
	}
	if len(errs) > 0 {
		fmt.Fprintf(stderr, "rlnode sbatch: %s\n", strings.Join(errs, "\nrlnode sbatch: "))
		return 2
	}
	if o.AddressFile != "" && !filepath.IsAbs(o.AddressFile) {
		abs, err := filepath.Abs(o.AddressFile)
		if err != nil {
			fmt.Fprintf(stderr, "rlnode sbatch: --address-file: %v\n", err)
			return 1
		}
		o.AddressFile = abs
	}
	return writeSbatch(o, nil, stdout, stderr)
}

// writeSbatch checks the options (against recipe r; nil with --serve)
// and prints the script.
func writeSbatch(o sbatchOptions, r *recipes.Recipe, stdout, stderr io.Writer) int {
	if o.Rlnode == "" {
		exe, err := os.Executable()
		if err != nil {
			fmt.Fprintf(stderr, "rlnode sbatch: find this binary: %v (pass --rlnode PATH)\n", err)
			return 1
		}
		o.Rlnode = exe
	}
	if o.Out != "" && !filepath.IsAbs(o.Out) {
		abs, err := filepath.Abs(o.Out)
		if err != nil {
			fmt.Fprintf(stderr, "rlnode sbatch: %v\n", err)
			return 1
		}
		o.Out = abs
	}
	if err := o.check(r); err != nil {
		fmt.Fprintf(stderr, "rlnode sbatch: %v\n", err)
		return 2
	}
	for _, w := range o.Warnings {
		fmt.Fprintf(stderr, "rlnode sbatch: warning: %s\n", w)
	}
	script, err := sbatchScript(o)
	if err != nil {
		fmt.Fprintf(stderr, "rlnode sbatch: %v\n", err)
		return 1
	}
	_, _ = io.WriteString(stdout, script)
	return 0
}

// check refuses options Slurm would refuse, or that cannot hold the
// recipe's actors (r; nil with --serve, whose jobs' recipes are checked
// when they are submitted).
func (o *sbatchOptions) check(r *recipes.Recipe) error {
	var errs []string
	switch {
	case o.Nodes == 0:
		errs = append(errs, "--nodes is required (at least 1)")
	case o.Nodes < 1:
		errs = append(errs, fmt.Sprintf("--nodes %d: want at least 1", o.Nodes))
	}
	if o.GPUsPerNode < 0 {
		errs = append(errs, "--gpus-per-node is required (0 for CPU-only nodes)")
	}
	if o.Time != "" && !slurmTime.MatchString(o.Time) {
		errs = append(errs, fmt.Sprintf("--time %q: want Slurm's format (MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS)", o.Time))
	}
	for _, f := range []struct{ name, v string }{{"--partition", o.Partition}, {"--account", o.Account}, {"--job-name", o.JobName}} {
		if strings.ContainsAny(f.v, " \t\n'\"\\$`") {
			errs = append(errs, fmt.Sprintf("%s %q: no blanks, quotes or shell characters", f.name, f.v))
		}
	}
	if o.CPUsPerTask < 0 {
		errs = append(errs, fmt.Sprintf("--cpus-per-task %d: want ≥ 1 (or 0 for Slurm's default)", o.CPUsPerTask))
	}
	if o.Mem != "" && !slurmMem.MatchString(o.Mem) {
		errs = append(errs, fmt.Sprintf("--mem %q: want Slurm's format (a number with an optional K, M, G or T suffix)", o.Mem))
	}
	if _, err := cluster.ParseDetection(o.Detection); err != nil {
		errs = append(errs, fmt.Sprintf("--detection: %v", err))
	}
	if o.Port < 0 || o.Port > 65535 {
		errs = append(errs, fmt.Sprintf("--port %d: want 0..65535", o.Port))
	}
	if o.Serve {
		switch {
		case o.ControlPort < 0 || o.ControlPort > 65535:
			errs = append(errs, fmt.Sprintf("--control-port %d: want 0..65535 (0 picks a free one)", o.ControlPort))
		case o.ControlPort != 0 && o.ControlPort == o.Port:
			errs = append(errs, fmt.Sprintf("--control-port %d and --port %d: the first node's control endpoint and gossip listen on one address; give them different ports", o.ControlPort, o.Port))
		}
		if strings.ContainsAny(o.AddressFile, "\n\r") {
			errs = append(errs, fmt.Sprintf("--address-file %q: no line breaks", o.AddressFile))
		}
	}
	if o.WaitTimeout < time.Second || o.StopTimeout < time.Second {
		errs = append(errs, "--wait-timeout and --stop-timeout: want at least 1s")
	} else if limit, ok := slurmSeconds(o.Time); ok {
		// The script's --signal asks for a TERM this long before the end,
		// so that the three stops fit; Slurm takes at most 65535 and may
		// send it up to 60 s early.
		warn := signalSeconds(o.StopTimeout)
		switch {
		case warn > 65535:
			errs = append(errs, fmt.Sprintf("--stop-timeout %v: with --time the job is told to stop 3 × it + 15 s = %d s before its end, over the 65535 s Slurm's --signal takes: want at most %v",
				o.StopTimeout, warn, time.Duration(65535-15)/3*time.Second))
		case limit <= warn+60:
			errs = append(errs, fmt.Sprintf("--time %s: the job is told to stop 3 × --stop-timeout (%v) + 15 s = %d s before its end (Slurm may tell it up to 60 s early), which leaves no time to run in %v: raise --time or lower --stop-timeout",
				o.Time, o.StopTimeout, warn, time.Duration(limit)*time.Second))
		}
	}
	if r != nil && o.GPUsPerNode >= 0 && o.Nodes >= 1 {
		p := r.Placement
		replicas := r.Engines.Policy.Replicas
		if r.Engines.Feedback != nil {
			replicas += r.Engines.Feedback.Replicas
		}
		// Each trained policy's learner holds placement.learner on each of
		// its shards: MLMT's feedback policy has one of its own, unless
		// static (no policy) or sharing the solver's weights.
		learners := 1
		if m := r.Algorithm.MLMT; r.Episode.Type == "mlmt" && !m.StaticFeedback && !m.SharedWeights {
			learners = 2
		}
		need := float64(replicas)*p.Rollout.GPUs + float64(learners*p.LearnerShards)*p.Learner.GPUs
		// Launched vLLM servers hold theirs; every node may start them.
		var servers float64
		for _, e := range []*recipes.Engine{&r.Engines.Policy, r.Engines.Feedback} {
			if e != nil && e.VLLM != nil && e.VLLM.Launch != nil {
				servers += float64(e.VLLM.Launch.Count) * e.VLLM.Launch.GPUs
				if o.VLLM == "" {
					o.VLLM = "vllm serve"
				}
			}
		}
		need += servers
		have := float64(o.Nodes * o.GPUsPerNode)
		switch {
		case need > have:
			launched := ""
			if servers > 0 {
				launched = fmt.Sprintf(" + %g for launched vLLM servers", servers)
			}
			errs = append(errs, fmt.Sprintf("the recipe's actors reserve %g GPUs (%d rollout actors × %g + %d learners × %d shards × %g%s) but %d nodes × %d GPUs give %g",
				need, replicas, p.Rollout.GPUs, learners, p.LearnerShards, p.Learner.GPUs, launched, o.Nodes, o.GPUsPerNode, have))
		case p.Rollout.GPUs > float64(o.GPUsPerNode) || p.Learner.GPUs > float64(o.GPUsPerNode):
			errs = append(errs, fmt.Sprintf("one actor reserves more GPUs (rollout %g, learner %g) than a node has (%d)", p.Rollout.GPUs, p.Learner.GPUs, o.GPUsPerNode))
		case need == 0 && o.GPUsPerNode > 0:
			o.Warnings = append(o.Warnings, fmt.Sprintf("--gpus-per-node %d: the recipe's actors reserve no GPUs (placement.rollout.gpus and placement.learner.gpus are 0), so the job would hold GPUs it does not use; pass --gpus-per-node 0, or set the placement's GPUs", o.GPUsPerNode))
		}
	}
	if len(errs) > 0 {
		return errors.New(strings.Join(errs, "\n"))
	}
	if o.JobName == "" && o.Serve {
		o.JobName = "rlnode-serve"
	} else if o.JobName == "" {
		o.JobName = "rlnode-" + regexp.MustCompile(`[^A-Za-z0-9_.-]`).ReplaceAllString(o.RecipeName, "_")
	}
	return nil
}

// signalSeconds is how long before the time limit the job asks Slurm
// for its TERM: time for the run, the joined nodes and the first node to
// stop in turn, and some to spare.
func signalSeconds(stop time.Duration) int { return 3*int(stop.Seconds()) + 15 }

// slurmSeconds is a --time value (Slurm's formats, slurmTime) in seconds;
// false for none, or no limit.
func slurmSeconds(v string) (int, bool) {
	if v == "" || !slurmTime.MatchString(v) || !strings.ContainsAny(v, "0123456789") {
		return 0, false
	}
	days, rest, hasDays := strings.Cut(v, "-")
	if !hasDays {
		days, rest = "0", v
	}
	var f []int
	for _, p := range strings.Split(rest, ":") {
		n, err := strconv.Atoi(p)
		if err != nil {
			return 0, false
		}
		f = append(f, n)
	}
	d, err := strconv.Atoi(days)
	if err != nil {
		return 0, false
	}
	var h, m, sec int
	switch {
	case hasDays && len(f) == 1: // D-HH
		h = f[0]
	case hasDays && len(f) == 2: // D-HH:MM
		h, m = f[0], f[1]
	case len(f) == 3: // [D-]HH:MM:SS
		h, m, sec = f[0], f[1], f[2]
	case len(f) == 2: // MM:SS
		m, sec = f[0], f[1]
	default: // MM
		m = f[0]
	}
	return ((d*24+h)*60+m)*60 + sec, true
}

var safeShell = regexp.MustCompile(`^[A-Za-z0-9_./:=@%+,-]+$`)

// shellQuote quotes s for bash, leaving plain words bare.
func shellQuote(s string) string {
	if safeShell.MatchString(s) {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func shellJoin(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		q[i] = shellQuote(a)
	}
	return strings.Join(q, " ")
}

// commentLine is s for one line of a comment in the script: a line break
// in it (a recipe file's name, a --set value) would end the comment and
// make the rest of the line a command, and end the #SBATCH header there.
// Breaks are shown as \n or \r.
func commentLine(s string) string {
	return strings.NewReplacer("\n", `\n`, "\r", `\r`).Replace(s)
}

// sbatchScript renders the batch script.
func sbatchScript(o sbatchOptions) (string, error) {
	runCmd := o.RunCmd
	if runCmd == "" {
		recipe, sets := shellQuote(o.Recipe), o.Sets
		if o.Resolved != "" {
			recipe, sets = `"$RLNODE_OUT/recipe.yaml"`, nil // the overrides are in it
		}
		// The driver joins as a node of its own, bound to the first node's
		// address and holding the cluster's key. It offers nothing: the
		// first node offers that host already, and a driver that offered
		// it too counted the host twice (its actors could overfill it).
		parts := []string{`"$RLNODE"`, "run", recipe, "--out", `"$RLNODE_OUT/run"`, "--address", `"$RLNODE_GOSSIP"`,
			"--key-file", `"$RLNODE_KEY"`, "--bind", `"$NODE_IP:0"`, "--driver-only"}
		if o.Detection != "fast" {
			parts = append(parts, "--detection", o.Detection)
		}
		for _, s := range sets {
			parts = append(parts, "--set", shellQuote(s))
		}
		runCmd = strings.Join(parts, " ")
	}
	out := `${SLURM_SUBMIT_DIR:-$PWD}/rlnode-${SLURM_JOB_ID}`
	if o.Out != "" {
		out = shellQuote(o.Out)
	}
	eof := "RLNODE_RECIPE_EOF"
	for strings.Contains(o.Resolved, eof) {
		eof += "_"
	}
	addressFile := `${SLURM_SUBMIT_DIR:-$PWD}/rlnode-%j.address`
	if o.AddressFile != "" {
		addressFile = shellQuote(o.AddressFile)
	}
	var b strings.Builder
	err := sbatchTemplate.Execute(&b, map[string]any{
		"AddressFile": addressFile,
		"Resolved":    o.Resolved,
		"EOF":         eof,
		"O":           o,
		"Rlnode":      shellQuote(o.Rlnode),
		"Out":         out,
		"RunCmd":      shellQuote(runCmd),
		"VLLM":        shellQuote(o.VLLM),
		"WaitS":       int(o.WaitTimeout.Seconds()),
		"StopS":       int(o.StopTimeout.Seconds()),
		"Recipe":      commentLine(o.Recipe),
		"Sets":        commentLine(shellJoin(o.Sets)),
		"SignalS":     signalSeconds(o.StopTimeout),
		"Command":     commentLine(o.GeneratedCmd),
	})
	return b.String(), err
}

var sbatchTemplate = template.Must(template.New("sbatch").Parse(`#!/bin/bash
# Generated by: {{.Command}}
{{- if .O.Serve}}
# Serves jobs submitted from the login host until scancel or the time limit:
# rlnode submit RECIPE --address URL --key-file KEY, with the URL and KEY the
# job writes to its address file (and prints).
{{- else}}
# Recipe {{.Recipe}}{{if .Sets}} with {{.Sets}}{{end}}: validated when this script was written{{if .Resolved}};
# the job runs it as resolved then (below, written to $RLNODE_OUT/recipe.yaml){{end}}.
{{- end}}
#SBATCH --job-name={{.O.JobName}}
#SBATCH --nodes={{.O.Nodes}}
#SBATCH --ntasks-per-node=1
{{- if gt .O.GPUsPerNode 0}}
#SBATCH --gpus-per-node={{.O.GPUsPerNode}}
{{- end}}
{{- if .O.Partition}}
#SBATCH --partition={{.O.Partition}}
{{- end}}
{{- if .O.Time}}
#SBATCH --time={{.O.Time}}
#SBATCH --signal=B:TERM@{{.SignalS}}
{{- end}}
{{- if .O.Account}}
#SBATCH --account={{.O.Account}}
{{- end}}
{{- if gt .O.CPUsPerTask 0}}
#SBATCH --cpus-per-task={{.O.CPUsPerTask}}
{{- end}}
{{- if .O.Mem}}
#SBATCH --mem={{.O.Mem}}
{{- end}}
{{- if .O.Exclusive}}
#SBATCH --exclusive
{{- end}}
set -uo pipefail
if [ -z "${SLURM_JOB_ID:-}" ] || [ -z "${SLURM_JOB_NODELIST:-}" ]; then
  echo "not inside a Slurm job: submit this script with sbatch" >&2
  exit 2
fi

export RLNODE={{.Rlnode}}
export RLNODE_NODES={{.O.Nodes}}
export RLNODE_GPUS_PER_NODE={{.O.GPUsPerNode}}
export RLNODE_OUT={{.Out}}
export RLNODE_KEY="$RLNODE_OUT/cluster.key"  # shared through the run directory
{{- if .O.VLLM}}
export RLNODE_VLLM_CMD={{.VLLM}}  # every node may start the run's vLLM servers (engines.*.vllm.launch)
{{- end}}
{{- if .O.Serve}}
RLNODE_ADDRESS_FILE={{.AddressFile}}
export RLNODE_ADDRESS_FILE=${RLNODE_ADDRESS_FILE//%j/$SLURM_JOB_ID}
{{- else}}
RUN_CMD={{.RunCmd}}
{{- end}}
WAIT_S={{.WaitS}}
STOP_S={{.StopS}}

log() { printf '[rlnode-sbatch %s] %s\n' "$(date +%H:%M:%S)" "$*"; }
if [ ! -x "$RLNODE" ]; then
  log "$RLNODE is not an executable file on $(hostname -s): put rlnode on a filesystem every node sees (--rlnode PATH)"
  exit 127
fi

mkdir -p "$RLNODE_OUT" || exit 1
{{- if .Resolved}}
cat >"$RLNODE_OUT/recipe.yaml" <<'{{.EOF}}'
{{.Resolved}}{{.EOF}}
{{- end}}

# The first node of the allocation runs 'rlnode start'; the others join it.
HEAD_NODE=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
HEAD_NODEADDR=$(scontrol show node "$HEAD_NODE" 2>/dev/null | sed -n 's/.*NodeAddr=\([^ ]*\).*/\1/p' | head -n 1)
export RLNODE_HEAD_ADDR=$(getent ahostsv4 "${HEAD_NODEADDR:-$HEAD_NODE}" | awk 'NR == 1 { print $1 }')
if [ -z "$RLNODE_HEAD_ADDR" ]; then
  log "cannot resolve the address of the first node $HEAD_NODE"
  exit 1
fi

# Run on every node: its GPUs as Slurm assigned them, the address the
# others reach it at, and a node-local RLNODE_HOME (run files hold PIDs).
NODE_ENV='
gpus_here() {
  if [ "$RLNODE_GPUS_PER_NODE" -eq 0 ]; then echo 0
  elif [ -n "${SLURM_GPUS_ON_NODE:-}" ]; then echo "$SLURM_GPUS_ON_NODE"
  elif [ -n "${CUDA_VISIBLE_DEVICES+set}" ]; then
    case "$CUDA_VISIBLE_DEVICES" in ""|NoDevFiles) echo 0 ;; *) echo "$CUDA_VISIBLE_DEVICES" | tr , "\n" | grep -c . ;; esac
  else echo "$RLNODE_GPUS_PER_NODE"
  fi
}
node_ip() {
  if [ -n "${RLNODE_ADVERTISE:-}" ]; then echo "$RLNODE_ADVERTISE"; return; fi
  ip -4 route get "$RLNODE_HEAD_ADDR" 2>/dev/null | sed -n "s/.* src \([0-9.]*\).*/\1/p" | head -n 1
}
NODE_NAME="${SLURMD_NODENAME:-$(hostname -s)}"
export RLNODE_HOME="${TMPDIR:-/tmp}/rlnode-${SLURM_JOB_ID}-${NODE_NAME}"
NODE_IP=$(node_ip)
if [ -z "$NODE_IP" ]; then NODE_IP=$(hostname -I | awk "{ print \$1 }"); fi
'
eval "$NODE_ENV"
export NODE_IP  # the run command binds the driver to it

HEAD_PID= SRUN_PID= RUN_PID={{if .O.Serve}} NAP_PID= SERVING={{end}}
stop_pid() { # stop_pid PID SECONDS: wait for PID to exit, then kill it
  local pid=$1 i
  for ((i = 0; i < $2 * 10; i++)); do
    kill -0 "$pid" 2>/dev/null || { wait "$pid" 2>/dev/null; return 0; }
    sleep 0.1
  done
  log "pid $pid still running after $2s: killing it"
  kill -KILL "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  return 1
}
{{- if .O.Serve}}
# The jobs that have not ended, from the first node's job list.
active_jobs() {
  "$RLNODE" job list --json --address "$RLNODE_GOSSIP" 2>/dev/null | tr -d ' \n' \
    | grep -o '"name":"[^"]*","status":"\(RUNNING\|PENDING\|RESTARTING\)"' | sed 's/^"name":"\([^"]*\)".*/\1/'
}
# Asks every job to stop after its current step, which it checkpoints, and
# waits (bounded) until none runs; a job submitted meanwhile is asked too.
stop_jobs() {
  local asked=" " name names deadline=$((SECONDS + STOP_S))
  while names=$(active_jobs); [ -n "$names" ]; do
    for name in $names; do
      case "$asked" in *" $name "*) continue ;; esac
      asked="$asked$name "
      if "$RLNODE" job stop "$name" --address "$RLNODE_GOSSIP" >/dev/null 2>&1; then
        log "job $name: asked to stop after its current step, which it checkpoints"
      fi
    done
    if [ "$SECONDS" -ge "$deadline" ]; then
      log "jobs still running after ${STOP_S}s, stopped with their nodes: "$names; return 1
    fi
    sleep 1
  done
  return 0
}
{{- end}}
cleanup() {
  local rc=$? clean=1
  trap - EXIT TERM INT
  log "shutting down (exit status $rc)"
{{- if .O.Serve}}
  if [ -n "$SERVING" ]; then
    # No new submits: the address file goes first (unless another job's
    # has replaced it), then the jobs stop, then the nodes.
    if [ "$(head -n 1 "$RLNODE_ADDRESS_FILE" 2>/dev/null)" = "$RLNODE_URL" ]; then rm -f "$RLNODE_ADDRESS_FILE"; fi
    stop_jobs || clean=0
  fi
  if [ -n "$NAP_PID" ]; then kill "$NAP_PID" 2>/dev/null; wait "$NAP_PID" 2>/dev/null; fi
{{- end}}
  if [ -n "$RUN_PID" ] && kill -0 "$RUN_PID" 2>/dev/null; then
    kill -TERM "$RUN_PID" 2>/dev/null; stop_pid "$RUN_PID" "$STOP_S" || clean=0
  fi
  if [ -n "$SRUN_PID" ] && kill -0 "$SRUN_PID" 2>/dev/null; then
    # TERM to every 'rlnode join' through Slurm, so they leave the cluster
    # (a TERM to srun itself makes Slurm kill the step's tasks).
    local step
    step=$(squeue -h -s -j "$SLURM_JOB_ID" -o "%i %j" 2>/dev/null | awk '$2 == "rlnode-join" { print $1; exit }')
    if [ -n "$step" ]; then scancel --signal=TERM "$step" 2>/dev/null; else kill -TERM "$SRUN_PID" 2>/dev/null; fi
    stop_pid "$SRUN_PID" "$STOP_S" || clean=0
  fi
  if [ -n "$HEAD_PID" ] && kill -0 "$HEAD_PID" 2>/dev/null; then
    # The last node of the cluster: its stop asks the jobs left to stop
    # first and waits for them, here 1 s, not 30 (stop_jobs gave --serve's
    # jobs their time), so that the whole shutdown fits the TERM's lead.
    "$RLNODE" stop --stop-timeout 1s >/dev/null 2>&1 || kill -TERM "$HEAD_PID" 2>/dev/null
    stop_pid "$HEAD_PID" "$STOP_S" || clean=0
  fi
  rm -rf "$RLNODE_HOME"
  if [ "$clean" = 1 ]; then log "all nodes stopped cleanly"; else log "some processes had to be killed"; fi
{{- if .O.Serve}}
  # Told to end while serving, and everything stopped in order: the
  # allocation did its work.
  if [ -n "$SERVING" ] && [ "$rc" = 143 ] && [ "$clean" = 1 ]; then rc=0; fi
{{- end}}
  exit "$rc"
}
trap cleanup EXIT
trap 'log "signal received"; exit 143' TERM INT

log "job $SLURM_JOB_ID: $RLNODE_NODES nodes ($SLURM_JOB_NODELIST), first $HEAD_NODE at $RLNODE_HEAD_ADDR, run directory $RLNODE_OUT"
"$RLNODE" start --bind "$NODE_IP:{{.O.Port}}"{{if .O.Serve}} --status-bind "$NODE_IP:{{.O.ControlPort}}"{{end}} --key-file "$RLNODE_KEY" --gpus "$(gpus_here)" --cpus "${SLURM_CPUS_PER_TASK:-0}"{{if ne .O.Detection "fast"}} --detection {{.O.Detection}}{{end}}{{if .O.VLLM}} --vllm "$RLNODE_VLLM_CMD"{{end}} \
  --label "slurm_node=$NODE_NAME" >"$RLNODE_OUT/node-$NODE_NAME.log" 2>&1 &
HEAD_PID=$!

# The first node's gossip address, from the run file it writes when up.
RLNODE_GOSSIP=
for ((i = 0; i < WAIT_S * 10; i++)); do
  RLNODE_GOSSIP=$(sed -n 's/.*"gossip_address": *"\([^"]*\)".*/\1/p' "$RLNODE_HOME"/run/*.json 2>/dev/null | head -n 1)
  [ -n "$RLNODE_GOSSIP" ] && break
  if ! kill -0 "$HEAD_PID" 2>/dev/null; then
    log "rlnode start failed:"; cat "$RLNODE_OUT/node-$NODE_NAME.log"
{{- if and .O.Serve (ne .O.ControlPort 0)}}
    if grep -q "control endpoint: .*address already in use" "$RLNODE_OUT/node-$NODE_NAME.log"; then
      log "another process on $NODE_NAME (another job's first node?) holds port {{.O.ControlPort}}: write the script with --control-port 0 to take a free one (the address file names it)"
    fi
    exit 1
{{- else}}; exit 1{{end}}
  fi
  sleep 0.1
done
if [ -z "$RLNODE_GOSSIP" ]; then log "rlnode start not up after ${WAIT_S}s"; exit 1; fi
export RLNODE_GOSSIP
log "first node up: gossip $RLNODE_GOSSIP"

if [ "$RLNODE_NODES" -gt 1 ]; then
  # A shared filesystem may show the new key file late: wait for it, bounded.
  JOIN='eval "$NODE_ENV"
if [ ! -x "$RLNODE" ]; then
  echo "rlnode-sbatch: $NODE_NAME: $RLNODE is not an executable file on this node: put rlnode on a filesystem every node sees (--rlnode PATH)" >&2
  exit 127
fi
for ((i = 0; i < 600; i++)); do [ -s "$RLNODE_KEY" ] && break; sleep 0.1; done
exec "$RLNODE" join "$RLNODE_GOSSIP" --bind "$NODE_IP:0" --key-file "$RLNODE_KEY" --gpus "$(gpus_here)" --cpus "${SLURM_CPUS_PER_TASK:-0}"{{if ne .O.Detection "fast"}} --detection {{.O.Detection}}{{end}}{{if .O.VLLM}} --vllm "$RLNODE_VLLM_CMD"{{end}} \
  --label "slurm_node=$NODE_NAME" >"$RLNODE_OUT/node-$NODE_NAME.log" 2>&1'
  export NODE_ENV
  srun --job-name=rlnode-join --nodes=$((RLNODE_NODES - 1)) --ntasks=$((RLNODE_NODES - 1)) --ntasks-per-node=1 \
    --exclude="$HEAD_NODE" --kill-on-bad-exit=0{{if gt .O.CPUsPerTask 0}} --cpus-per-task={{.O.CPUsPerTask}}{{end}}{{if gt .O.GPUsPerNode 0}} --gpus-per-node={{.O.GPUsPerNode}}{{end}} bash -c "$JOIN" &
  SRUN_PID=$!
fi

# Wait until every node is up, counting ALIVE entries of status' nodes array.
alive_nodes() {
  "$RLNODE" status --json 2>/dev/null | tr -d ' \n' | sed -n 's/.*"nodes":\[\(.*\)\],"actors".*/\1/p' \
    | grep -o '"state":"ALIVE"' | wc -l
}
deadline=$((SECONDS + WAIT_S))
while :; do
  up=$(alive_nodes)
  [ "$up" -ge "$RLNODE_NODES" ] && break
  if [ "$SECONDS" -ge "$deadline" ]; then
    log "only $up of $RLNODE_NODES nodes up after ${WAIT_S}s; node logs are in $RLNODE_OUT"; exit 1
  fi
  if ! kill -0 "$HEAD_PID" 2>/dev/null; then log "the first node exited"; exit 1; fi
  if [ -n "$SRUN_PID" ] && ! kill -0 "$SRUN_PID" 2>/dev/null; then
    log "the joining nodes exited; their logs are in $RLNODE_OUT"; exit 1
  fi
  sleep 1
done
log "$up of $RLNODE_NODES nodes up"
{{- if .O.Serve}}

# Serve: the first node's control endpoint, written where the login host
# reads it (written whole, then renamed: a reader never sees half of it).
CONTROL=$(sed -n 's/.*"control_address": *"\([^"]*\)".*/\1/p' "$RLNODE_HOME"/run/*.json 2>/dev/null | head -n 1)
if [ -z "$CONTROL" ]; then log "the first node's control endpoint is not in its run file ($RLNODE_HOME/run)"; exit 1; fi
export RLNODE_URL="http://$CONTROL"
SERVING=1
mkdir -p "$(dirname "$RLNODE_ADDRESS_FILE")" || exit 1
if ! (umask 077 && printf '%s\n%s\n' "$RLNODE_URL" "$RLNODE_KEY" >"$RLNODE_ADDRESS_FILE.tmp.$$" && mv -f "$RLNODE_ADDRESS_FILE.tmp.$$" "$RLNODE_ADDRESS_FILE"); then
  rm -f "$RLNODE_ADDRESS_FILE.tmp.$$"; log "cannot write the address file $RLNODE_ADDRESS_FILE"; exit 1
fi
log "serving jobs at $RLNODE_URL until scancel or the time limit; address file $RLNODE_ADDRESS_FILE"
SUBMIT=$(printf '%q ' "$RLNODE" submit RECIPE --address "$RLNODE_URL" --key-file "$RLNODE_KEY")
log "submit with: ${SUBMIT% }"
log "end it with: scancel --batch --signal=TERM $SLURM_JOB_ID (as at the time limit: running jobs stop after their current step, which they checkpoint, then the nodes stop; a plain scancel signals every process at once, and a job may lose its last step)"
log "continue a stopped job's run in another allocation with: rlnode submit RUN/job-recipe.yaml --resume --out RUN"
while :; do
  if ! kill -0 "$HEAD_PID" 2>/dev/null; then log "the first node exited; its log is $RLNODE_OUT/node-$NODE_NAME.log"; exit 1; fi
  if [ -n "$SRUN_PID" ] && ! kill -0 "$SRUN_PID" 2>/dev/null; then
    log "the joining nodes exited; their logs are in $RLNODE_OUT"; exit 1
  fi
  sleep 5 &
  NAP_PID=$!
  wait "$NAP_PID"
  NAP_PID=
done
{{- else}}

log "running: $RUN_CMD"
bash -c "$RUN_CMD" &
RUN_PID=$!
wait "$RUN_PID"
rc=$?
RUN_PID=
log "run finished with exit status $rc"
exit "$rc"
{{- end}}
`))
