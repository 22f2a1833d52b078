package main

import (
	"fmt"
	"io"
	"runtime"

	"github.com/rlnode/rlnode/cluster"
	"github.com/rlnode/rlnode/internal/buildinfo"
	"github.com/rlnode/rlnode/learner/blas"
)

// command is one subcommand: it gets its own arguments and writers and
// returns the process exit code.
type command func(args []string, stdout, stderr io.Writer) int

var commands = map[string]command{}

func runMain(args []string, stdout, stderr io.Writer) int {
	if len(args) == 2 && args[0] == "help" {
		// rlnode help COMMAND is COMMAND's own help.
		if cmd, ok := commands[args[1]]; ok {
			return cmd([]string{"-h"}, stdout, stderr)
		}
	}
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stdout, usage())
		return 0
	}
	if args[0] == "--version" || args[0] == "-version" || args[0] == "version" {
		fmt.Fprintln(stdout, version())
		return 0
	}
	cmd, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "rlnode: unknown command %q\n\n%s", args[0], usage())
		return 2
	}
	return cmd(args[1:], stdout, stderr)
}

// version is "rlnode VERSION (COMMIT[, modified]) GO", the module version
// and the VCS revision the binary was built from as the Go toolchain
// recorded them, then a line naming the CPU backend's matrix kernel (the
// instructions it chose; a checkpoint's bytes depend on them), and the
// cluster wire protocol (nodes of a cluster must share it).
func version() string {
	return "rlnode " + buildinfo.String() + " " + runtime.Version() + "\ncpu kernel: " + blas.KernelName() + " (" + blas.ISAEnv + " caps it: avx512, avx2, generic)" +
		fmt.Sprintf("\ncluster wire protocol: %d (every node of a cluster runs the same)", cluster.Wire)
}
