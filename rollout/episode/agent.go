package episode

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/rlnode/rlnode/learner/tokenizer"
	"github.com/rlnode/rlnode/rollout/data"
	"github.com/rlnode/rlnode/rollout/engine"
	"github.com/rlnode/rlnode/rollout/env"
)

// Agent is the episode in which the policy acts in an environment, up to
// MaxSteps steps: the environment's observation and valid actions are the
// user message; the policy's turn is parsed for its last
// <action>name</action> or <action>name(param)</action> (env.ParseAction);
// the environment steps with it and its next observation is the next user
// message. A turn with no well-formed action steps the environment with
// the empty action name, which it answers as an invalid action (with its
// penalty); the parse error is in the turn's Note.
//
// Each step is one Turn (Turn = the step's index): the chat so far as
// PromptIDs, the policy's tokens, logprobs and loss mask, Reward the
// environment's reward for that step; every turn's FinalReward is the
// episode's total. The last turn's Note names the outcome when the
// environment gives one (Info["outcome"]).
//
// Example i's task is its Prompt, its seed Seed + its group id (or
// EnvSeed's): the N episodes of a group play the same episode of the
// environment (Reset must be deterministic). A Reset error fails the run
// (the task is the caller's); a Step error ends that episode with a note;
// a step whose prompt no longer fits the context (engine.ErrContextFull)
// ends it after the last step that fitted; other engine failures follow
// Runner.
type Agent struct {
	Policy Policy
	// NewEnv makes the environment of one episode; each is used by one
	// goroutine at a time and checked with env.Checked.
	NewEnv   func() env.Env
	MaxSteps int // steps per episode; 0 means 8
	Seed     int64
	System   string // the system message; empty: none
	Limits   Limits
	// Prompter, when set, writes each step's prompt as text in the
	// model's own format instead of the chat messages above (System is
	// then unused).
	Prompter AgentPrompter
	// Chats, when set, receives every episode's chat once the batch has
	// played, in the order of Run's turns: the system message, then each
	// observation as a user message (as chat prompts show it) and each
	// turn the environment took as an assistant message (as Limits quote
	// it); a turn the engine or the environment failed adds none.
	Chats func(group int64, sample int, chat []tokenizer.Message)
	// EnvSeed, when set, is the seed of group's environment in place of
	// Seed + group (the N episodes of a group share it).
	EnvSeed func(group int64) int64
}

// AgentPrompter writes the prompt of an agent step as text in the model's
// own format (no chat template). Implementations must be safe for
// concurrent use.
type AgentPrompter interface {
	AgentPrompt(v AgentView) (string, error)
}

// AgentView is what an agent step's prompt may show: the step (0-based),
// the latest observation, and the actions taken so far as written in the
// action format ("?" for a turn that held none).
type AgentView struct {
	Step        int
	Observation env.Observation
	Taken       []string
}

// Notes of agent turns (data.Turn.Note, joined by "; "), read back by
// AgentStepOf.
const (
	NoteInvalid   = "invalid action: "
	NoteOutcome   = "outcome: "
	NoteToolCall  = "tool call: "
	NoteToolError = "tool error: "
	NoteEnvError  = "environment: " // the step failed; the episode ended there
	// NoteContextFull ends an episode whose next prompt plus max_tokens
	// no longer fits the model's context (then the step's number).
	NoteContextFull = "stopped: context full at step "
)

// AgentStep is what one agent turn did, read from its text and note:
// the action's name (empty when the turn held none), whether the
// environment refused it, the outcome when it ended the episode, and
// whether it called a tool and the call failed, and whether the
// environment failed to take the step.
type AgentStep struct {
	Action              string
	Invalid             bool
	Outcome             string
	ToolCall, ToolError bool
	EnvError            bool
}

// AgentStepOf reads one turn of an agent episode.
func AgentStepOf(t data.Turn) AgentStep {
	var s AgentStep
	if a, err := env.ParseAction(t.ResponseText); err == nil {
		s.Action = a.Name
	}
	for _, n := range strings.Split(t.Note, "; ") {
		switch {
		case strings.HasPrefix(n, NoteInvalid):
			s.Invalid = true
		case strings.HasPrefix(n, NoteOutcome):
			s.Outcome = strings.TrimPrefix(n, NoteOutcome)
		case strings.HasPrefix(n, NoteToolCall):
			s.ToolCall = true
		case strings.HasPrefix(n, NoteToolError):
			s.ToolError = true
		case strings.HasPrefix(n, NoteEnvError):
			s.EnvError = true
		}
	}
	return s
}

// agentState is one episode in play.
type agentState struct {
	i, sample int
	group     int64
	env       env.Env
	msgs      []tokenizer.Message
	obs       env.Observation // the latest
	taken     []string
	turns     []data.Turn
	done      bool
	err       error // a Step error other than ctx's
}

// Run implements Runner.
func (r *Agent) Run(ctx context.Context, b Batch) ([]data.Turn, error) {
	if err := b.check(); err != nil {
		return nil, err
	}
	if err := r.Policy.check("agent"); err != nil {
		return nil, err
	}
	if r.NewEnv == nil {
		return nil, errors.New("agent episode: no environment")
	}
	lim := r.Limits.withDefaults()
	maxSteps := r.MaxSteps
	if maxSteps <= 0 {
		maxSteps = 8
	}
	var eps []*agentState
	for i, ex := range b.Examples {
		g := b.FirstGroupID + int64(i)
		for s := range b.N {
			e := &agentState{i: i, sample: s, group: g, env: env.Checked(r.NewEnv())}
			seed := r.Seed + g
			if r.EnvSeed != nil {
				seed = r.EnvSeed(g)
			}
			obs, err := e.env.Reset(ctx, seed, ex.Prompt)
			if err != nil {
				return nil, fmt.Errorf("agent episode: example %q: %w", ex.ID, err)
			}
			if r.System != "" {
				e.msgs = append(e.msgs, tokenizer.Message{Role: "system", Content: r.System})
			}
			e.msgs = append(e.msgs, tokenizer.Message{Role: "user", Content: renderObservation(lim, obs)})
			e.obs = obs
			eps = append(eps, e)
		}
	}
	// Step 0: one request of N samples per example.
	reqs := make([]call, len(b.Examples))
	for i := range b.Examples {
		e := eps[i*b.N]
		pr, err := r.prompt(e, 0)
		if err != nil {
			return nil, err
		}
		req, err := r.Policy.request(fmt.Sprintf("g%d-a0", e.group), pr, b.params(r.Policy.Params, StageFirst, i, 0, 0, b.N))
		if err != nil {
			return nil, err
		}
		reqs[i] = req
	}
	outs, err := generate(ctx, r.Policy, reqs)
	if err != nil {
		return nil, err
	}
	live := eps
	results := make([]outcome, len(eps))
	for k, e := range eps {
		results[k] = outcomeOf(outs[e.i], e.sample)
	}
	for step := 0; ; step++ {
		if err := r.play(ctx, lim, live, results, step, maxSteps); err != nil {
			return nil, err
		}
		var next []*agentState
		var reqs []call
		for _, e := range live {
			if e.done {
				continue
			}
			p := b.params(r.Policy.Params, StageFinal+step+1, e.i, e.sample, step+1, 1)
			pr, err := r.prompt(e, step+1)
			if err != nil {
				return nil, err
			}
			req, err := r.Policy.request(fmt.Sprintf("%s-a%d", episodeID(e.group, e.sample), step+1), pr, p)
			if err != nil {
				return nil, err
			}
			next, reqs = append(next, e), append(reqs, req)
		}
		if len(reqs) == 0 {
			break
		}
		outs, err := generate(ctx, r.Policy, reqs)
		if err != nil {
			return nil, err
		}
		live, results = next, outs
	}
	var turns []data.Turn
	for _, e := range eps {
		var total float64
		for _, t := range e.turns {
			total += t.Reward
		}
		for k := range e.turns {
			e.turns[k].FinalReward = total
			setEpisode(&e.turns[k], e.group, e.sample, k)
		}
		turns = append(turns, e.turns...)
		if r.Chats != nil {
			r.Chats(e.group, e.sample, e.msgs)
		}
	}
	return turns, nil
}

// prompt is the prompt of episode e's step: the Prompter's text, or the
// chat so far.
func (r *Agent) prompt(e *agentState, step int) (Prompt, error) {
	if r.Prompter == nil {
		return Prompt{Messages: append([]tokenizer.Message(nil), e.msgs...)}, nil
	}
	text, err := r.Prompter.AgentPrompt(AgentView{Step: step, Observation: e.obs, Taken: append([]string(nil), e.taken...)})
	if err != nil {
		return Prompt{}, fmt.Errorf("agent episode: step %d prompt: %w", step, err)
	}
	return Prompt{Text: text}, nil
}

// outcomeOf is sample s of o, as an outcome of one sample.
func outcomeOf(o outcome, s int) outcome {
	if o.err != nil {
		return o
	}
	o.res.Samples = o.res.Samples[s : s+1]
	return o
}

// play records step of every live episode from its engine outcome and
// steps its environment, the episodes at once. Only ctx ending is an
// error.
func (r *Agent) play(ctx context.Context, lim Limits, live []*agentState, outs []outcome, step, maxSteps int) error {
	var wg sync.WaitGroup
	for k, e := range live {
		o := outs[k]
		if n := len(e.turns); o.err != nil && n > 0 && errors.Is(o.err, engine.ErrContextFull) {
			// The chat has outgrown the model's context: the episode
			// ends after its last step, as at max_steps.
			e.turns[n-1].Note = joinNotes(e.turns[n-1].Note, fmt.Sprintf("%s%d", NoteContextFull, step))
			e.done = true
			continue
		}
		if o.err != nil {
			e.turns = append(e.turns, failedTurn(r.Policy, o, fmt.Sprintf("step %d: %v", step, o.err)))
			e.done = true
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.playOne(ctx, lim, e, o, step, maxSteps)
		}()
	}
	wg.Wait()
	return ctx.Err()
}

func (r *Agent) playOne(ctx context.Context, lim Limits, e *agentState, o outcome, step, maxSteps int) {
	smp := o.res.Samples[0]
	t := turnOf(r.Policy, o, smp)
	var notes []string
	a, err := env.ParseAction(smp.Text)
	taken := a.String()
	if err != nil {
		notes = append(notes, err.Error())
		a, taken = env.Action{}, "?"
	}
	start := time.Now()
	sr, err := e.env.Step(ctx, a)
	if a.Name != "" {
		// The action, as tracing agents record a tool call: what it
		// returned is the next observation.
		tc := data.ToolCall{Name: a.Name, Arguments: a.Param, Start: start, End: time.Now()}
		switch {
		case err != nil:
			tc.Error = err.Error()
		case sr.Invalid != "":
			tc.Error, tc.Result = sr.Invalid, sr.Observation.Text
		case sr.Info[env.InfoToolError] != "":
			tc.Error, tc.Result = sr.Info[env.InfoToolError], sr.Observation.Text
		default:
			tc.Result = sr.Observation.Text
		}
		t.Call.AddTool(tc)
	}
	switch {
	case err != nil:
		notes = append(notes, NoteEnvError+err.Error())
		e.done = true
	default:
		t.Reward = sr.Reward
		if sr.Invalid != "" {
			notes = append(notes, NoteInvalid+sr.Invalid)
		}
		if tool := sr.Info[env.InfoTool]; tool != "" {
			notes = append(notes, NoteToolCall+tool)
		}
		if te := sr.Info[env.InfoToolError]; te != "" {
			notes = append(notes, NoteToolError+te)
		}
		if sr.Done {
			if oc := sr.Info[env.InfoOutcome]; oc != "" {
				notes = append(notes, NoteOutcome+oc)
			}
			e.done = true
		} else if step+1 >= maxSteps {
			notes = append(notes, fmt.Sprintf("stopped after %d steps", maxSteps))
			e.done = true
		}
		said, _ := lim.Quote(smp.Text)
		e.msgs = append(e.msgs,
			tokenizer.Message{Role: "assistant", Content: said},
			tokenizer.Message{Role: "user", Content: renderObservation(lim, sr.Observation)})
		e.obs, e.taken = sr.Observation, append(e.taken, taken)
	}
	t.Note = joinNotes(notes...)
	e.turns = append(e.turns, t)
}

// renderObservation is the user message of an observation: its text (cut
// to the quote limit), the valid actions and how to write one.
func renderObservation(lim Limits, obs env.Observation) string {
	text, _ := lim.Quote(obs.Text)
	var sb strings.Builder
	sb.WriteString(text)
	if len(obs.Actions) > 0 {
		sb.WriteString("\n\nValid actions:\n")
		for _, a := range obs.Actions {
			fmt.Fprintf(&sb, "- %s: %s\n", a.Usage(), a.Description)
		}
		sb.WriteString("\nReply with one action as " + env.ActionOpen + "name" + env.ActionClose +
			" or " + env.ActionOpen + "name(value)" + env.ActionClose + ".")
	}
	return sb.String()
}
