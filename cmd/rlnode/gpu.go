package main

import (
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/rlnode/rlnode/learner/cuda"
)

func init() { commands["gpu"] = gpuCommand }

// gpuCommand prints what the CUDA backend finds on this host: the driver,
// NVRTC and cuBLASLt it loaded, the GPUs, and every reason it cannot run.
func gpuCommand(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("rlnode gpu", flag.ContinueOnError)
	fs.SetOutput(stderr)
	require := fs.Bool("require", false, "exit 1 when the CUDA backend cannot run here")
	emulated := fs.Bool("emulated", false, "build the emulated GPU (needs g++; NVRTC stays the real one) and print the environment that makes rlnode use it")
	fs.Usage = func() {
		fmt.Fprint(stderr, "usage: rlnode gpu [--require | --emulated]\n  report the CUDA driver, NVRTC, cuBLASLt and GPUs found, and why the CUDA backend cannot run\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "rlnode gpu: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	if *emulated {
		// The CUDA code paths on the CPU, for development on hosts
		// without a GPU: slow, and no figure from it says anything about
		// a GPU.
		env, err := cuda.EmulatedGPUEnv()
		if err == nil {
			fmt.Fprintln(stdout, strings.Join(env, "\n"))
			return 0
		}
		fmt.Fprintf(stderr, "rlnode gpu --emulated: %v\n", err)
		return 1
	}
	r := cuda.Available()
	fmt.Fprint(stdout, r.String())
	if *require && r.Err() != nil {
		return 1
	}
	return 0
}
