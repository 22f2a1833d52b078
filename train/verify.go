package train

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rlnode/rlnode/cluster"
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
// address space per process and 1 GiB per run where the host gives runs a
// cgroup, 32 processes, 16 MiB of files, 64 KiB of output, so a hanging or
// hostile program costs at most 10 s of one worker.
func newVerifier(cfg Config) (verify.Verifier, error) {
	switch cfg.Verifier {
	case "", VerifierMath:
		return verify.Math{}, nil
	case VerifierGSM8K:
		return verify.GSM8K{}, nil
	case VerifierCode:
		sb, err := verify.NewSandbox(verify.SandboxConfig{Mode: cfg.SandboxMode, Concurrency: cfg.sandboxConcurrency()})
		if err != nil {
			return nil, fmt.Errorf("code verifier: %w", err)
		}
		logSandbox(cfg.Logger, "code verifier", sb)
		return verify.Code{Sandbox: sb}, nil
	}
	return nil, fmt.Errorf("train config: verifier %q: want math, gsm8k or code", cfg.Verifier)
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

// sandboxConcurrency is how many runs the driver's own sandboxes let go at
// once: VerifyWorkers where verifications run in the driver (checked
// against verify.MaxConcurrency in validate), else the sandbox's default
// (the cores, within the host's bound): with verify_on cluster,
// verify_workers counts tasks in flight on the whole cluster.
func (c *Config) sandboxConcurrency() int {
	if c.VerifyOn == VerifyOnCluster {
		return 0
	}
	return c.verifyWorkers()
}

// newPython is the python tool of tool episodes (PythonTool): each call
// runs as a program in verify's sandbox, with the code verifier's limits;
// nil without the tool.
func newPython(cfg Config) (episode.PythonExecutor, error) {
	if !cfg.PythonTool {
		return nil, nil
	}
	sb, err := verify.NewSandbox(verify.SandboxConfig{Mode: cfg.SandboxMode, Concurrency: cfg.sandboxConcurrency()})
	if err != nil {
		return nil, fmt.Errorf("python tool: %w", err)
	}
	logSandbox(cfg.Logger, "python tool", sb)
	return episode.SandboxPython{Sandbox: sb}, nil
}

// logSandbox says which sandbox runs generated code (auto picks bwrap or
// namespaces by what works on this host) and how a run's memory is
// bounded: a run never leaves it unsaid.
func logSandbox(log *slog.Logger, use string, sb *verify.Sandbox) {
	if log != nil {
		log.Info("code sandbox", "for", use, "mode", sb.Mode(), "isolation", sb.Isolation(), "memory", sb.RunBound())
	}
}

// Where code verifications run (Config.VerifyOn).
const (
	VerifyOnDriver  = "driver"
	VerifyOnCluster = "cluster"
)

// verifyTaskName is the cluster task that runs one code verification
// (VerifyOnCluster); every rlnode process registers it.
const verifyTaskName = "rlnode.verify.code"

// verifyTask is one code verification sent to a node.
type verifyTask struct {
	Response    string
	Ref         verify.Reference
	SandboxMode string
}

// clusterVerifyTimeout bounds one verification on the cluster: the wait
// for a free CPU and the sandbox's own 10 s.
const clusterVerifyTimeout = 5 * time.Minute

// sandboxes are this process's code sandboxes for cluster verifications,
// one per mode, made at the first task.
var sandboxes sync.Map // mode -> *sandboxOnce

type sandboxOnce struct {
	once sync.Once
	sb   *verify.Sandbox
	err  error
}

func init() {
	cluster.RegisterTask(verifyTaskName, func(ctx context.Context, t verifyTask) (verify.Result, error) {
		v, _ := sandboxes.LoadOrStore(t.SandboxMode, &sandboxOnce{})
		s := v.(*sandboxOnce)
		s.once.Do(func() {
			// The node's cores within the host's bound (verify.MaxConcurrency);
			// the task's CPU reservation keeps runs within the cores anyway.
			s.sb, s.err = verify.NewSandbox(verify.SandboxConfig{Mode: t.SandboxMode})
			log := slog.Default()
			if n := cluster.TaskNode(ctx); n != nil {
				log = n.Logger()
			}
			if s.err == nil {
				logSandbox(log, "cluster verification tasks", s.sb)
			}
		})
		if s.err != nil {
			host, _ := os.Hostname()
			return verify.Result{}, fmt.Errorf("code sandbox on host %s: %w", host, s.err)
		}
		return verify.Code{Sandbox: s.sb}.Verify(ctx, t.Response, t.Ref), nil
	})
}

// clusterVerifier runs code verifications as cluster tasks of one CPU
// each, on whichever nodes have one free, so a run's verification is not
// bound to the driver's cores. A task lost with its node runs again
// elsewhere. A verification that cannot be had at all (no free CPU within
// clusterVerifyTimeout, a node whose sandbox cannot start) is not scored
// 0 as a wrong answer would be: the first such failure is kept (failure)
// and the driver stops the run at the step's end with it.
type clusterVerifier struct {
	node   *cluster.Node
	mode   string
	failed atomic.Pointer[error]
}

func (v *clusterVerifier) Verify(ctx context.Context, response string, ref verify.Reference) verify.Result {
	tctx, cancel := context.WithTimeout(ctx, clusterVerifyTimeout)
	defer cancel()
	res, err := cluster.Submit[verify.Result](tctx, v.node, verifyTaskName, verifyTask{Response: response, Ref: ref, SandboxMode: v.mode},
		cluster.TaskOptions{Resources: cluster.Resources{cluster.CPU: 1}, MaxRetries: 3}).Get(tctx)
	if err == nil {
		clusterVerified.Add(1)
		return res
	}
	if ctx.Err() != nil {
		return verify.Result{Error: ctx.Err().Error()}
	}
	if errors.Is(err, context.DeadlineExceeded) {
		err = fmt.Errorf("no CPU of the cluster was free for a verification within %v (every node's CPUs held by actors?): free some, or set data.verify_on: driver: %w", clusterVerifyTimeout, err)
	}
	err = fmt.Errorf("code verification on the cluster: %w", err)
	v.failed.CompareAndSwap(nil, &err)
	return verify.Result{Error: err.Error()}
}

// clusterVerified counts the verifications cluster tasks answered in
// this process.
var clusterVerified atomic.Int64

// verifierFailure is the failure a verifier keeps that must stop the run
// (clusterVerifier), or nil.
func verifierFailure(v verify.Verifier) error {
	if cv, ok := v.(*clusterVerifier); ok {
		if p := cv.failed.Load(); p != nil {
			return *p
		}
	}
	return nil
}
