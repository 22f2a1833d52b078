package main

import (
	"fmt"
	"io"
)

// command is one subcommand: it gets its own arguments and writers and
// returns the process exit code.
type command func(args []string, stdout, stderr io.Writer) int

var commands = map[string]command{}

func runMain(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stdout, usage())
		return 0
	}
	cmd, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "rlnode: unknown command %q\n\n%s", args[0], usage())
		return 2
	}
	return cmd(args[1:], stdout, stderr)
}
