package simlm

import (
	"context"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"regexp"
	"strconv"
	"strings"

	"github.com/rlnode/rlnode/rollout/engine"
)

// ContextTokens is the model's context length.
const ContextTokens = 2048

// maxPromptBytes bounds what one request may carry.
const maxPromptBytes = 64 << 10

// Engine is the scripted model. The zero value is ready; it is safe for
// concurrent use.
type Engine struct {
	// Verbatim makes the model write an arithmetic question's expression
	// as the question writes it (precedence left to the tool) when it
	// sends the whole question to a tool, instead of fully parenthesised:
	// a transcript a small network can learn by copying.
	Verbatim bool
}

var _ engine.Engine = Engine{}

// WeightVersion implements engine.Engine; the model never changes.
func (Engine) WeightVersion() int64 { return 0 }

// Close implements engine.Engine.
func (Engine) Close() error { return nil }

// Generate implements engine.Engine. Requests must carry chat messages.
func (e Engine) Generate(ctx context.Context, reqs []engine.Request) ([]engine.Result, error) {
	out := make([]engine.Result, len(reqs))
	for i, r := range reqs {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if len(r.Messages) == 0 {
			return nil, fmt.Errorf("simlm: request %q: %w: no chat messages", r.ID, engine.ErrBadRequest)
		}
		if r.Params.MaxTokens <= 0 {
			return nil, fmt.Errorf("simlm: request %q: %w: max_tokens %d", r.ID, engine.ErrBadRequest, r.Params.MaxTokens)
		}
		var size int
		var prompt []string
		for _, m := range r.Messages {
			size += len(m.Content)
			prompt = append(prompt, m.Content)
		}
		if size > maxPromptBytes {
			return nil, fmt.Errorf("simlm: request %q: %w: prompt of %d bytes", r.ID, engine.ErrBadRequest, size)
		}
		pids := TokenIDs(strings.Join(prompt, "\n"))
		if len(pids)+r.Params.MaxTokens > ContextTokens {
			return nil, fmt.Errorf("simlm: request %q: %w: %d prompt tokens + max_tokens %d exceed the %d-token context", r.ID, engine.ErrBadRequest, len(pids), r.Params.MaxTokens, ContextTokens)
		}
		n := max(r.Params.N, 1)
		res := engine.Result{RequestID: r.ID, PromptTokenIDs: pids}
		for s := range n {
			var seed int64
			if r.Params.Seed != nil {
				seed = *r.Params.Seed
			}
			text := respond(r.Messages, uint64(seed)+uint64(s), e.Verbatim)
			text, finish := truncate(text, r.Params.MaxTokens)
			ids := TokenIDs(text)
			res.Samples = append(res.Samples, engine.Sample{TokenIDs: ids, LogProbs: make([]float32, len(ids)), Text: text, FinishReason: finish})
		}
		out[i] = res
	}
	return out, nil
}

// pieceRE is the tokenizer: words, single digits, and other characters.
var pieceRE = regexp.MustCompile(`[A-Za-z]+|[0-9]|[^\sA-Za-z0-9]`)

// TokenIDs tokenizes text as the model counts it (ids are hashes).
func TokenIDs(text string) []int {
	ps := pieceRE.FindAllString(text, -1)
	ids := make([]int, len(ps))
	for i, p := range ps {
		h := fnv.New32a()
		h.Write([]byte(p))
		ids[i] = int(h.Sum32() % 32000)
	}
	return ids
}

// truncate cuts text after max tokens.
func truncate(text string, max int) (string, string) {
	locs := pieceRE.FindAllStringIndex(text, max+1)
	if len(locs) <= max {
		return text, "stop"
	}
	return text[:locs[max-1][1]], "length"
}

// prompt is what the model understood of its messages.
type prompt struct {
	role                                    string
	calc, python, search                    bool
	budget                                  int
	stepByStep, concise, check, tools, form bool
	restate                                 bool
	question, reasoning, verification       string
	responses                               []string // tool responses so far
}

var (
	roleRE     = regexp.MustCompile(`You are the (reasoner|verifier|answerer)`)
	toolsRE    = regexp.MustCompile(`(?m)^Tools: (.*)$`)
	budgetRE   = regexp.MustCompile(`Token budget: (\d+)`)
	responseRE = regexp.MustCompile(`(?s)<tool_response>\s*(.*?)\s*</tool_response>`)
)

func section(s, name string) string {
	i := strings.Index(s, name+":\n")
	if i < 0 {
		return ""
	}
	s = s[i+len(name)+2:]
	if j := strings.Index(s, "\n\n"); j >= 0 {
		s = s[:j]
	}
	return s
}

func parsePrompt(msgs []struct{ role, content string }) prompt {
	var p prompt
	for i, m := range msgs {
		switch {
		case m.role == "system":
			c := m.content
			if r := roleRE.FindStringSubmatch(c); r != nil {
				p.role = r[1]
			}
			if t := toolsRE.FindStringSubmatch(c); t != nil {
				p.calc = strings.Contains(t[1], "calculator")
				p.python = strings.Contains(t[1], "python")
				p.search = strings.Contains(t[1], "search")
			}
			if b := budgetRE.FindStringSubmatch(c); b != nil {
				p.budget, _ = strconv.Atoi(b[1])
			}
			l := strings.ToLower(c)
			p.stepByStep = strings.Contains(l, "step by step")
			p.concise = strings.Contains(l, "concise")
			p.check = strings.Contains(l, "double-check")
			p.tools = strings.Contains(l, "use a tool")
			p.form = strings.Contains(l, "#### <answer>")
			p.restate = strings.Contains(l, "restate")
		case m.role == "user" && i <= 1:
			c := m.content
			if q := section(c, "Question"); q != "" {
				p.question = strings.TrimSpace(q)
			}
			p.reasoning = section(c, "Reasoning")
			p.verification = section(c, "Verification")
		case m.role == "user":
			if r := responseRE.FindStringSubmatch(m.content); r != nil {
				p.responses = append(p.responses, r[1])
			}
		}
	}
	return p
}

// respond writes the model's next segment: everything after the tool
// responses it has already seen, up to its next tool call or its end.
func respond(msgs []engineMessage, seed uint64, verbatim bool) string {
	ms := make([]struct{ role, content string }, len(msgs))
	for i, m := range msgs {
		ms[i].role, ms[i].content = m.Role, m.Content
	}
	p := parsePrompt(ms)
	h := fnv.New64a()
	fmt.Fprintf(h, "%s\x00%s\x00%d", p.role, p.question, p.budget)
	w := &writer{p: p, rng: rand.New(rand.NewPCG(seed, h.Sum64())), verbatim: verbatim}
	w.run()
	return w.cur.String()
}
