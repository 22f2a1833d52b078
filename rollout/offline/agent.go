package offline

import (
	"fmt"
	"strings"
	"sync"

	"github.com/rlnode/rlnode/learner/tokenizer"
	"github.com/rlnode/rlnode/rollout/data"
	"github.com/rlnode/rlnode/rollout/env"
	"github.com/rlnode/rlnode/rollout/episode"
)

// Chats keeps the chats of a model's agent episodes (episode.Agent's
// Chats field: set it to Record) so that Episodes can write them in the
// JSONL format. Safe for concurrent use.
type Chats struct {
	mu    sync.Mutex
	chats map[[2]int64][]tokenizer.Message
}

// Record keeps the chat of episode sample of group.
func (c *Chats) Record(group int64, sample int, chat []tokenizer.Message) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.chats == nil {
		c.chats = map[[2]int64][]tokenizer.Message{}
	}
	c.chats[[2]int64{group, int64(sample)}] = append([]tokenizer.Message(nil), chat...)
}

// Episodes are the agent episodes of turns (as episode.Agent returns
// them, each episode's turns together) as JSONL episodes of environment
// envName, task and policy, episode seeds from seed(group): the recorded
// chat as the messages, per turn the action it took in the action format
// ("" for none), its reward and why the environment refused it, the
// outcome of the last turn. An episode with a failed turn, or whose chat
// was not recorded or does not match its turns, is an error naming it.
func (c *Chats) Episodes(envName, task, policy string, seed func(group int64) int64, turns []data.Turn) ([]Episode, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []Episode
	for lo := 0; lo < len(turns); {
		hi := lo + 1
		for hi < len(turns) && turns[hi].EpisodeID == turns[lo].EpisodeID {
			hi++
		}
		first := turns[lo]
		chat, ok := c.chats[[2]int64{first.GroupID, int64(first.Sample)}]
		if !ok {
			return nil, fmt.Errorf("episode %s: no chat recorded", first.EpisodeID)
		}
		ep := Episode{Env: envName, Task: task, Seed: seed(first.GroupID), Policy: policy, Messages: chat}
		for _, t := range turns[lo:hi] {
			if t.FinishReason == "error" {
				return nil, fmt.Errorf("episode %s turn %d failed: %s", t.EpisodeID, t.Turn, t.Note)
			}
			st := Step{Reward: t.Reward}
			if a, err := env.ParseAction(t.ResponseText); err == nil {
				st.Action = a.String()
			}
			for _, n := range strings.Split(t.Note, "; ") {
				if why, ok := strings.CutPrefix(n, episode.NoteInvalid); ok {
					st.Invalid = why
				}
			}
			ep.Steps = append(ep.Steps, st)
			ep.Total += t.Reward
		}
		ep.Outcome = episode.AgentStepOf(turns[hi-1]).Outcome
		if err := ep.Check(); err != nil {
			return nil, fmt.Errorf("episode %s: %w", first.EpisodeID, err)
		}
		out = append(out, ep)
		lo = hi
	}
	return out, nil
}
