package ctxopt

import (
	"fmt"
	"slices"
	"strings"
)

// Structure is a workflow's shape: which agents run, in order.
type Structure int

// The structures.
const (
	Direct             Structure = iota // answerer alone
	ReasonAnswer                        // reasoner, then answerer
	ReasonVerifyAnswer                  // reasoner, verifier, answerer
	NumStructures
)

var structureNames = [...]string{"direct", "reason-answer", "reason-verify-answer"}

func (s Structure) String() string {
	if s >= 0 && s < NumStructures {
		return structureNames[s]
	}
	return fmt.Sprintf("Structure(%d)", int(s))
}

// Role is one agent of a workflow.
type Role int

// The roles, in the order a workflow runs them.
const (
	Reasoner Role = iota
	Verifier
	Answerer
	NumRoles
)

var roleNames = [...]string{"reasoner", "verifier", "answerer"}

func (r Role) String() string {
	if r >= 0 && r < NumRoles {
		return roleNames[r]
	}
	return fmt.Sprintf("Role(%d)", int(r))
}

// Uses reports whether structure s runs role r.
func (s Structure) Uses(r Role) bool {
	switch r {
	case Answerer:
		return true
	case Reasoner:
		return s != Direct
	case Verifier:
		return s == ReasonVerifyAnswer
	}
	return false
}

// Tool names the executor knows.
const (
	ToolCalculator = "calculator"
	ToolPython     = "python"
	ToolSearch     = "search"
)

// KnownTools are the tools a space may offer.
var KnownTools = []string{ToolCalculator, ToolPython, ToolSearch}

// Space is the set of configurations a policy chooses from.
type Space struct {
	Tools    []string // tools an agent may get; every subset is a choice
	Budgets  []int    // token budgets per agent, e.g. 64, 256, 512
	Atoms    []string // the prompt-atom library
	MaxAtoms int      // atoms per agent at most (the prompt policy's horizon)
}

// Check reports a space no policy can act in.
func (s Space) Check() error {
	if len(s.Budgets) == 0 {
		return fmt.Errorf("configuration space: no token budgets")
	}
	for _, b := range s.Budgets {
		if b <= 0 {
			return fmt.Errorf("configuration space: token budget %d must be positive", b)
		}
	}
	if len(s.Atoms) == 0 {
		return fmt.Errorf("configuration space: the prompt-atom library is empty")
	}
	if len(s.Tools) > 3 {
		return fmt.Errorf("configuration space: %d tools, at most 3", len(s.Tools))
	}
	for i, t := range s.Tools {
		if !slices.Contains(KnownTools, t) {
			return fmt.Errorf("configuration space: unknown tool %q (known: %s)", t, strings.Join(KnownTools, ", "))
		}
		if slices.Index(s.Tools, t) != i {
			return fmt.Errorf("configuration space: tool %q listed twice", t)
		}
	}
	if s.MaxAtoms < 1 || s.MaxAtoms > len(s.Atoms) {
		return fmt.Errorf("configuration space: max atoms %d not in 1..%d (the library's size)", s.MaxAtoms, len(s.Atoms))
	}
	return nil
}

// ToolSets is the number of tool subsets: 2^len(Tools).
func (s Space) ToolSets() int { return 1 << len(s.Tools) }

// AgentChoices is the number of (tool subset, budget) pairs of one agent.
func (s Space) AgentChoices() int { return s.ToolSets() * len(s.Budgets) }

// ToolSet returns the tools of subset index m (bit i: Tools[i]).
func (s Space) ToolSet(m int) []string {
	var out []string
	for i, t := range s.Tools {
		if m&(1<<i) != 0 {
			out = append(out, t)
		}
	}
	return out
}

// Agent is one agent's configuration.
type Agent struct {
	Tools  int   // subset index into Space.Tools
	Budget int   // index into Space.Budgets
	Atoms  []int // indexes into Space.Atoms, in prompt order
}

// Config is one workflow configuration. Agents of roles the structure
// does not use are ignored.
type Config struct {
	Structure Structure
	Agents    [NumRoles]Agent
}

// AgentChoice packs an agent's tools and budget into one index of
// AgentChoices, and UnpackAgent undoes it.
func (s Space) AgentChoice(a Agent) int { return a.Tools*len(s.Budgets) + a.Budget }

// UnpackAgent sets a's tools and budget from choice.
func (s Space) UnpackAgent(choice int) Agent {
	return Agent{Tools: choice / len(s.Budgets), Budget: choice % len(s.Budgets)}
}

// Describe writes c compactly: "reason-answer R[calculator,256] A[-,64]".
func (s Space) Describe(c Config) string {
	var b strings.Builder
	b.WriteString(c.Structure.String())
	for r := Role(0); r < NumRoles; r++ {
		if !c.Structure.Uses(r) {
			continue
		}
		a := c.Agents[r]
		tools := strings.Join(s.ToolSet(a.Tools), "+")
		if tools == "" {
			tools = "-"
		}
		fmt.Fprintf(&b, " %c[%s,%d", strings.ToUpper(r.String())[0], tools, s.Budgets[a.Budget])
		for _, at := range a.Atoms {
			fmt.Fprintf(&b, ",a%d", at)
		}
		b.WriteString("]")
	}
	return b.String()
}

// Check reports a configuration outside the space.
func (s Space) CheckConfig(c Config) error {
	if c.Structure < 0 || c.Structure >= NumStructures {
		return fmt.Errorf("structure %d out of range", c.Structure)
	}
	for r := Role(0); r < NumRoles; r++ {
		if !c.Structure.Uses(r) {
			continue
		}
		a := c.Agents[r]
		if a.Tools < 0 || a.Tools >= s.ToolSets() || a.Budget < 0 || a.Budget >= len(s.Budgets) {
			return fmt.Errorf("%s: tools %d or budget %d out of range", r, a.Tools, a.Budget)
		}
		if len(a.Atoms) > s.MaxAtoms {
			return fmt.Errorf("%s: %d atoms, at most %d", r, len(a.Atoms), s.MaxAtoms)
		}
		for _, at := range a.Atoms {
			if at < 0 || at >= len(s.Atoms) {
				return fmt.Errorf("%s: atom %d out of range", r, at)
			}
		}
	}
	return nil
}

// FixedConfigs lists the configurations that give every agent the same
// tools and budget and no atoms: every structure × tool subset × budget.
func (s Space) FixedConfigs() []Config {
	var out []Config
	for st := Structure(0); st < NumStructures; st++ {
		for t := range s.ToolSets() {
			for b := range s.Budgets {
				var c Config
				c.Structure = st
				for r := range c.Agents {
					c.Agents[r] = Agent{Tools: t, Budget: b}
				}
				out = append(out, c)
			}
		}
	}
	return out
}
