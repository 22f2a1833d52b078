package main

import (
	"fmt"
	"io"
	"path/filepath"

	"github.com/rlnode/rlnode/train"
)

// `rlnode plot DIR` redraws DIR/curves.png from DIR/metrics.jsonl, as
// `rlnode run` does at its end.

func init() { commands["plot"] = plotCommand }

const plotUsage = `usage: rlnode plot DIR

Redraws DIR/curves.png from DIR/metrics.jsonl: reward, accuracy per turn,
KL and entropy, and tokens/s against step.
`

func plotCommand(args []string, stdout, stderr io.Writer) int {
	if len(args) == 1 && (args[0] == "-h" || args[0] == "--help") {
		fmt.Fprint(stdout, plotUsage)
		return 0
	}
	if len(args) != 1 {
		fmt.Fprintf(stderr, "rlnode plot: want one run directory\n\n%s", plotUsage)
		return 2
	}
	out := filepath.Join(args[0], "curves.png")
	if err := train.WriteCurves(filepath.Join(args[0], "metrics.jsonl"), out); err != nil {
		fmt.Fprintf(stderr, "rlnode plot: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "curves: %s\n", out)
	return 0
}
