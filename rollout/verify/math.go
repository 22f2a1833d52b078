package verify

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

// Math scores competition-math responses (MATH, the synthetic tasks): the
// final answer found by ExtractAnswer against the reference answer, with
// Equivalent. The reference may be a bare answer or a whole solution
// holding a \boxed{} answer. Its zero value is ready to use.
type Math struct{}

// Verify implements Verifier.
func (Math) Verify(_ context.Context, response string, ref Reference) (res Result) {
	defer recoverResult(&res)
	want, err := referenceAnswer(ref.Answer)
	if err != nil {
		return Result{Error: err.Error()}
	}
	got, err := ExtractAnswer(response)
	if err != nil {
		return Result{Error: err.Error()}
	}
	if Equivalent(got, want) {
		return Result{Reward: 1}
	}
	return Result{}
}

// GSM8K scores grade-school word problems: the response's "#### N" (or a
// \boxed{} or "The answer is" answer) against the number after the
// reference's "####" (or the whole reference).
type GSM8K struct {
	// LastNumber takes the last number of a response that states no
	// answer in any recognized form (the "flexible" GSM8K match). Off by
	// default: a policy should learn to state its answer.
	LastNumber bool
}

// Verify implements Verifier.
func (g GSM8K) Verify(_ context.Context, response string, ref Reference) (res Result) {
	defer recoverResult(&res)
	want := ref.Answer
	if i := strings.LastIndex(want, "####"); i >= 0 {
		want = want[i+len("####"):]
	}
	want = strings.TrimSpace(want)
	if want == "" {
		return Result{Error: "reference answer is empty"}
	}
	got, err := ExtractGSM8K(response, g.LastNumber)
	if err != nil {
		return Result{Error: err.Error()}
	}
	if Equivalent(got, want) {
		return Result{Reward: 1}
	}
	return Result{}
}

// referenceAnswer takes the \boxed{} answer out of a reference solution,
// or the reference itself when it holds none.
func referenceAnswer(ref string) (string, error) {
	ref = strings.TrimSpace(ref)
	if ref == "" {
		return "", errors.New("reference answer is empty")
	}
	if len(ref) > MaxResponseBytes {
		return "", fmt.Errorf("reference answer is %d bytes, over the %d-byte limit", len(ref), MaxResponseBytes)
	}
	if ans, ok, err := lastBoxed(ref); err != nil {
		return "", fmt.Errorf("reference answer: %w", err)
	} else if ok {
		return ans, nil
	}
	return ref, nil
}

// recoverResult turns a panic in a verifier into a zero reward with a
// note, keeping Verifier's promise never to panic even on input nobody
// foresaw.
func recoverResult(res *Result) {
	if r := recover(); r != nil {
		*res = Result{Error: fmt.Sprintf("verifier failed: %v", r)}
	}
}
