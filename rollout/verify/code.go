package verify

import (
	"context"
	"fmt"
	"regexp"
	"strings"
)

// Code scores MBPP-style responses: the program in the response runs in
// the Sandbox after the reference's Setup, then each of the reference's
// Tests (assert statements) runs on its own; the reward is the fraction
// of tests that pass. Safe for concurrent use.
type Code struct {
	Sandbox *Sandbox
}

// MaxProgramBytes is the longest program the code verifier runs.
const MaxProgramBytes = 256 << 10

var fenceRE = regexp.MustCompile("(?s)```[ \\t]*(?:python3?|py)?[ \\t]*\\r?\\n(.*?)```")

// ExtractProgram takes the program out of a response: the last fenced
// code block (```python ... ``` or ``` ... ```), else the whole response.
func ExtractProgram(response string) string {
	blocks := fenceRE.FindAllStringSubmatch(response, -1)
	if len(blocks) == 0 {
		return response
	}
	return blocks[len(blocks)-1][1]
}

// Verify implements Verifier.
func (c Code) Verify(ctx context.Context, response string, ref Reference) (res Result) {
	defer recoverResult(&res)
	if c.Sandbox == nil {
		return Result{Error: "code verifier has no sandbox"}
	}
	if len(ref.Tests) == 0 {
		return Result{Error: "reference has no tests"}
	}
	if len(response) > MaxResponseBytes {
		return Result{Error: fmt.Sprintf("response is %d bytes, over the %d-byte limit", len(response), MaxResponseBytes)}
	}
	program := ExtractProgram(response)
	if strings.TrimSpace(program) == "" {
		return Result{Error: "empty program"}
	}
	if len(program) > MaxProgramBytes {
		return Result{Error: fmt.Sprintf("program is %d bytes, over the %d-byte limit", len(program), MaxProgramBytes)}
	}
	run, err := c.Sandbox.RunPython(ctx, PythonJob{Setup: ref.Setup, Program: program, Tests: ref.Tests})
	if err != nil {
		return Result{Error: err.Error()}
	}
	res.Reward = float64(run.Passed) / float64(len(ref.Tests))
	if run.OutOfMemory {
		// The run went over its memory as a whole: what passed before the
		// kill does not count, as no test of a program that dies counts.
		res.Reward = 0
	}
	var notes []string
	if run.ProgramError != "" {
		notes = append(notes, run.ProgramError)
	}
	if run.Stopped != "" {
		notes = append(notes, "stopped: "+run.Stopped)
	}
	res.Error = strings.Join(notes, "; ")
	return res
}
