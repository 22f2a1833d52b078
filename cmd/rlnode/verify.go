package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"

	"github.com/rlnode/rlnode/rollout/verify"
)

func init() { commands["verify"] = verifyCommand }

const verifyUsage = `usage:
  rlnode verify --task math|gsm8k|code --in FILE.jsonl [--out FILE.jsonl]
                [--workers N] [--sandbox auto|bwrap|namespaces|rlimit-only-trusted-code]
                [--last-number]
      score model responses offline. Each input line is a JSON object:
        math, gsm8k: {"response": "...", "answer": "..."}
        code:        {"response": "...", "tests": ["assert ...", ...], "setup": "..."}
      Each line is written back (to --out, or stdout) in input order with
      all its fields, plus "reward" (0..1) and, when the response could not
      be scored normally, "error". Lines that are not JSON objects are
      reported on stderr as FILE:LINE and left out; the others go on.
      Exit status 1 when any line was bad.
      Code runs contained: under bubblewrap, else in namespaces of its own
      (auto takes the first that works here, and refuses to run code when
      neither does); rlimit-only-trusted-code contains nothing (the code
      can reach this user's files, processes and the network) and is only
      for code you trust. Each program's run is bounded as a whole (1 GiB,
      its processes and files together) by a cgroup of its own where this
      host allows one, else per process (512 MiB each); which applies is
      printed. For code, --workers is at most 2 per core, and no more
      than the host's memory holds at 1 GiB a run; for answers, 16 per
      core.
`

// answerWorkersPerCore bounds --workers for math and gsm8k: past it more
// goroutines only take memory.
const answerWorkersPerCore = 16

func verifyCommand(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("rlnode verify", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, verifyUsage) }
	task := fs.String("task", "", "math, gsm8k or code")
	in := fs.String("in", "", "input JSONL file")
	out := fs.String("out", "", "output JSONL file (default stdout)")
	most, why := verify.MaxConcurrency(verify.DefaultLimits())
	workers := fs.Int("workers", min(runtime.NumCPU(), most), fmt.Sprintf("lines scored at once; code: at most %d here (%s)", most, why))
	sandboxMode := fs.String("sandbox", "auto", "code sandbox: auto (bwrap when it works, else namespaces), bwrap, namespaces, or rlimit-only-trusted-code (contains nothing)")
	lastNumber := fs.Bool("last-number", false, "gsm8k: take the last number of a response that states no answer")
	err := parseFlags(fs, args, "task", "in")
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err == nil && *workers < 1 {
		err = usageError{fmt.Errorf("--workers %d: want at least 1", *workers)}
	}
	if *task != "code" {
		// Answers are checked in microseconds, each worker a goroutine.
		most, why = answerWorkersPerCore*runtime.NumCPU(), fmt.Sprintf("%d per core × %d cores for answers", answerWorkersPerCore, runtime.NumCPU())
	}
	if err == nil && *workers > most {
		err = usageError{fmt.Errorf("--workers %d: at most %d on this host (%s)", *workers, most, why)}
	}
	var v verify.Verifier
	if err == nil {
		switch *task {
		case "math":
			v = verify.Math{}
		case "gsm8k":
			v = verify.GSM8K{LastNumber: *lastNumber}
		case "code":
			mode := *sandboxMode
			switch mode {
			case "auto":
				mode = ""
			case verify.ModeBwrap, verify.ModeNamespaces, verify.ModeRlimitOnly:
			default:
				err = usageError{fmt.Errorf("--sandbox %q: want auto, bwrap, namespaces or rlimit-only-trusted-code", mode)}
			}
			if err != nil {
				break
			}
			var sb *verify.Sandbox
			sb, err = verify.NewSandbox(verify.SandboxConfig{Mode: mode, Concurrency: *workers})
			if err == nil {
				fmt.Fprintf(stderr, "rlnode verify: sandbox %s\n", sb.Isolation())
				fmt.Fprintf(stderr, "rlnode verify: memory bounded %s\n", sb.RunBound())
				v = verify.Code{Sandbox: sb}
			}
		default:
			err = usageError{fmt.Errorf("--task %q: want math, gsm8k or code", *task)}
		}
	}
	var ue usageError
	if errors.As(err, &ue) {
		fmt.Fprintf(stderr, "rlnode verify: %v\n\n%s", err, verifyUsage)
		return 2
	}
	if err != nil {
		fmt.Fprintf(stderr, "rlnode verify: %v\n", err)
		return 1
	}

	f, err := os.Open(*in)
	if err != nil {
		fmt.Fprintf(stderr, "rlnode verify: %v\n", err)
		return 1
	}
	defer f.Close()
	w := stdout
	var outFile *os.File
	if *out != "" {
		outFile, err = os.Create(*out)
		if err != nil {
			fmt.Fprintf(stderr, "rlnode verify: %v\n", err)
			return 1
		}
		w = outFile
	}
	bw := bufio.NewWriter(w)
	sum, err := verify.ScoreJSONL(context.Background(), v, f, bw, verify.JSONLConfig{Name: *in, Code: *task == "code", Workers: *workers, Report: stderr})
	if ferr := bw.Flush(); err == nil {
		err = ferr
	}
	if outFile != nil {
		if cerr := outFile.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "rlnode verify: %v\n", err)
		return 1
	}
	mean := 0.0
	if sum.Written > 0 {
		mean = sum.RewardSum / float64(sum.Written)
	}
	fmt.Fprintf(stderr, "rlnode verify: %d lines written, mean reward %.4f, %d with an error note, %d bad lines left out\n",
		sum.Written, mean, sum.Noted, sum.Bad)
	if sum.Bad > 0 || sum.BadFields > 0 {
		return 1
	}
	return 0
}
