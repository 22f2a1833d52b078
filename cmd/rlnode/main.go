// Command rlnode is the CLI: it parses flags and calls the packages.
package main

import "os"

func main() {
	os.Exit(runMain(os.Args[1:], os.Stdout, os.Stderr))
}

func usage() string {
	return `usage: rlnode COMMAND [flags]

commands:
  run      run a recipe (built-in name or file): rlnode run quickstart
  plot     redraw a run's curves.png from its metrics.jsonl
  eval     accuracy of a checkpoint on a recipe's held-out problems (greedy, or mean@n, pass@k)
  start    start the first node of a cluster (foreground, or --detach)
  join     join a cluster: rlnode join HOST:PORT --key-file PATH
  status   show the cluster's nodes and actors
  stop     stop a node gracefully (--all: every node on this host)
  submit   run a recipe as a job on the cluster, which goes on without this terminal
  job      list, follow (logs --follow) and stop the cluster's jobs
  dashboard  serve the cluster and runs pages for a browser (127.0.0.1:8265)
  model    create a checkpoint (model init) or score sequences (model forward)
  serve    serve a model over an OpenAI-compatible HTTP API (or proxy one: --upstream URL), recording traces
  traces   list, show, stats, export, annotate and reward recorded traces
  verify   score model responses (math, gsm8k, code) from JSONL
  recipe   list, show or validate recipes (built-in names or files)
  sbatch   print a Slurm batch script that runs a recipe on N nodes
  gpu      report the CUDA libraries and GPUs found, and why the CUDA backend cannot run
  ctxopt   learn agent configurations for a fixed model (train, eval, benchmark)
  env      play a scripted, random or model policy in an environment and write its trajectories

Run 'rlnode COMMAND -h' for a command's flags, 'rlnode --version' for the version.
`
}
