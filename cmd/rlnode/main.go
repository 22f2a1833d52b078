// Command rlnode is the CLI: it parses flags and calls the packages.
package main

import "os"

func main() {
	os.Exit(runMain(os.Args[1:], os.Stdout, os.Stderr))
}

func usage() string {
	return `usage: rlnode COMMAND [flags]

commands:
  start    start the first node of a cluster
  join     join a cluster
  status   show the cluster's nodes and actors
  stop     stop a node gracefully
  model    create and inspect model checkpoints
`
}
