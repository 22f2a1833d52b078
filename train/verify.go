package train

import (
	"fmt"
	"runtime"

	"github.com/rlnode/rlnode/rollout/episode"
	"github.com/rlnode/rlnode/rollout/verify"
)

// Verifiers (Config.Verifier).
const (
	VerifierMath  = "math"
	VerifierGSM8K = "gsm8k"
	VerifierCode  = "code"
)

// newVerifier builds the run's verifier. Code runs each program in
// verify's sandbox (bwrap where it works, else namespaces; SandboxMode
// forces one) with verify.DefaultLimits: 10 s wall clock per program (the
// process group is killed then), 3 s per test, 5 CPU seconds, 512 MiB of
// address space, 32 processes, 16 MiB of files, 64 KiB of output, so a
// hanging or hostile program costs at most 10 s of one worker.
func newVerifier(cfg Config) (verify.Verifier, error) {
	switch cfg.Verifier {
	case "", VerifierMath:
		return verify.Math{}, nil
	case VerifierGSM8K:
		return verify.GSM8K{}, nil
	case VerifierCode:
		sb, err := verify.NewSandbox(verify.SandboxConfig{Mode: cfg.SandboxMode, Concurrency: cfg.verifyWorkers()})
		if err != nil {
			return nil, fmt.Errorf("driver: code verifier: %w", err)
		}
		return verify.Code{Sandbox: sb}, nil
	}
	return nil, fmt.Errorf("driver config: verifier %q: want math, gsm8k or code", cfg.Verifier)
}

// verifyWorkers is how many verifications run at once: VerifyWorkers, or
// the machine's cores for code (sandboxed Python is the slow part of a
// code step) and 1 for math and gsm8k (microseconds each).
func (c *Config) verifyWorkers() int {
	switch {
	case c.VerifyWorkers > 0:
		return c.VerifyWorkers
	case c.Verifier == VerifierCode:
		return runtime.NumCPU()
	}
	return 1
}

// newPython is the python tool of tool episodes (PythonTool): each call
// runs as a program in verify's sandbox, with the code verifier's limits;
// nil without the tool.
func newPython(cfg Config) (episode.PythonExecutor, error) {
	if !cfg.PythonTool {
		return nil, nil
	}
	sb, err := verify.NewSandbox(verify.SandboxConfig{Mode: cfg.SandboxMode, Concurrency: cfg.verifyWorkers()})
	if err != nil {
		return nil, fmt.Errorf("driver: python tool: %w", err)
	}
	return episode.SandboxPython{Sandbox: sb}, nil
}
