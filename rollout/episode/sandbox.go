package episode

import (
	"context"
	"strings"

	"github.com/rlnode/rlnode/rollout/verify"
)

// SandboxPython is the python tool backed by the code verifier's sandbox:
// each call runs the code as a program in a fresh sandboxed process, with
// the sandbox's time, memory, process and output limits.
type SandboxPython struct {
	Sandbox *verify.Sandbox
}

// RunPython implements PythonExecutor: the output is stdout, then stderr,
// then the program's exception and why the run was stopped, if so.
func (p SandboxPython) RunPython(ctx context.Context, code string) (string, error) {
	run, err := p.Sandbox.RunPython(ctx, verify.PythonJob{Program: code})
	if err != nil {
		return "", err
	}
	var b strings.Builder
	b.Write(run.Stdout)
	b.Write(run.Stderr)
	if run.ProgramError != "" {
		b.WriteString("\n" + run.ProgramError)
	}
	if run.Truncated {
		b.WriteString("\n[output cut at the sandbox's limit]")
	}
	if run.Stopped != "" {
		b.WriteString("\n[stopped: " + run.Stopped + "]")
	}
	return strings.TrimSpace(b.String()), nil
}
