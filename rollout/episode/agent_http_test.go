package episode_test

import (
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rlnode/rlnode/rollout/data"
	"github.com/rlnode/rlnode/rollout/engine"
	"github.com/rlnode/rlnode/rollout/env"
	"github.com/rlnode/rlnode/rollout/env/envtest"
	"github.com/rlnode/rlnode/rollout/episode"
	"github.com/rlnode/rlnode/rollout/episode/episodetest"
)

var clue = regexp.MustCompile(`(\d+) is too (low|high)`)

// bisector guesses by halving what the server's answers leave.
func bisector(r engine.Request, _ int) string {
	lo, hi := 1, 16
	for _, m := range r.Messages {
		if c := clue.FindStringSubmatch(m.Content); m.Role == "user" && c != nil {
			n, _ := strconv.Atoi(c[1])
			if c[2] == "low" {
				lo = n + 1
			} else {
				hi = n - 1
			}
		}
	}
	return "<action>guess(" + strconv.Itoa((lo+hi)/2) + ")</action>"
}

func httpAgent(eng engine.Engine, url string) *episode.Agent {
	return &episode.Agent{
		Policy: policy("actor", eng),
		NewEnv: func() env.Env {
			h, _ := env.NewHTTP(url, env.HTTPOptions{Retries: 2, Backoff: time.Millisecond})
			return h
		},
	}
}

// The agent episode plays an environment served over HTTP by a real
// Python process: the chats, rewards and outcomes are the server's.
func TestAgentHTTP(t *testing.T) {
	url, _ := envtest.GuessServer(t)
	eng := episodetest.NewScriptedEngine(bisector)
	examples := []data.Example{{ID: "eleven", Prompt: "11"}, {ID: "drawn", Prompt: "heldout"}}
	turns, err := httpAgent(eng, url).Run(ctx(t), episode.Batch{Examples: examples, N: 2})
	if err != nil {
		t.Fatal(err)
	}
	checkTurns(t, turns)
	byEpisode := map[string][]data.Turn{}
	for _, tr := range turns {
		byEpisode[tr.EpisodeID] = append(byEpisode[tr.EpisodeID], tr)
	}
	if len(byEpisode) != 4 {
		t.Fatalf("%d episodes, want 4", len(byEpisode))
	}
	for id, ts := range byEpisode {
		last := ts[len(ts)-1]
		if last.Reward != 1 || !strings.Contains(last.Note, "outcome: solved") || last.FinalReward != 1-0.1*float64(len(ts)-1) {
			t.Fatalf("episode %s: %d turns, last %+v", id, len(ts), last)
		}
	}
	first := eng.Requests()[0].Messages
	if !strings.HasPrefix(first[0].Content, "Find the hidden number from 1 to 16") || !strings.Contains(first[0].Content, "- guess(n): guess the hidden number") {
		t.Fatalf("first prompt %q", first[0].Content)
	}
}

// A server killed mid-episode ends each episode with a note naming the
// URL and the step; the batch does not fail and nothing hangs.
func TestAgentHTTPServerKilled(t *testing.T) {
	url, cmd := envtest.GuessServer(t)
	var once sync.Once
	eng := episodetest.NewScriptedEngine(nil)
	eng.Reply = func(r engine.Request, k int) string {
		if stepOf(r) == 1 {
			once.Do(func() { cmd.Process.Kill(); cmd.Wait() })
		}
		return bisector(r, k)
	}
	turns, err := httpAgent(eng, url).Run(ctx(t), episode.Batch{Examples: []data.Example{{ID: "one", Prompt: "1"}}, N: 2})
	if err != nil {
		t.Fatal(err)
	}
	if len(turns) != 4 {
		t.Fatalf("%d turns, want 2 steps of 2 episodes", len(turns))
	}
	for _, tr := range turns {
		if tr.Turn != 1 {
			continue
		}
		// A kept-alive connection meets the dead server as EOF (a step
		// that may have reached it is never sent again); a new one is
		// refused, and retried.
		gone := strings.HasSuffix(tr.Note, ": EOF") || strings.Contains(tr.Note, "connection refused (after 3 attempts)")
		if !strings.Contains(tr.Note, "environment: step 2 (guess(4)): http environment "+url+"/step (episode ep-") || !gone || tr.Reward != 0 {
			t.Fatalf("step 2 on a killed server: %+v", tr)
		}
	}
}
