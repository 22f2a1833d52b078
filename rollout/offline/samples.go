package offline

import (
	"fmt"
	"strings"

	"github.com/rlnode/rlnode/learner/tokenizer"
	"github.com/rlnode/rlnode/rollout/data"
)

// Sample is one supervised example: a prompt, a response and its loss
// mask (1: trained), and the reward that weights it.
type Sample struct {
	Prompt   []int32
	Response []int32
	Mask     []float32
	Reward   float64
	Episode  string // where it came from: FILE:LINE or the episode id
	Step     int
}

// EpisodeSamples are the samples of episodes, one per assistant message:
// the prompt is the chat before it (Qwen2.5's template, with the
// generation prompt), the response its tokens and <|im_end|>, every token
// trained; the reward is the episode's total. A sample longer than maxLen
// tokens (0: no limit) is an error; name is the file for errors.
func EpisodeSamples(name string, episodes []Episode, tok *tokenizer.Tokenizer, maxLen int) ([]Sample, error) {
	end := tok.Encode(tokenizer.IMEnd)
	var out []Sample
	for i, ep := range episodes {
		step := 0
		for k, m := range ep.Messages {
			if m.Role != "assistant" {
				continue
			}
			prompt := tok.EncodeChat(ep.Messages[:k], true)
			resp := append(tok.Encode(m.Content), end...)
			if maxLen > 0 && len(prompt)+len(resp) > maxLen {
				return nil, fmt.Errorf("%s: episode %d step %d: %d tokens, more than the model's context of %d tokens", name, i+1, step, len(prompt)+len(resp), maxLen)
			}
			out = append(out, Sample{Prompt: toInt32(prompt), Response: toInt32(resp), Mask: ones(len(resp)),
				Reward: ep.Total, Episode: fmt.Sprintf("%s#%d", name, i+1), Step: step})
			step++
		}
	}
	return out, nil
}

// TurnSamples are the samples of a run's trajectory turns: their prompt,
// response and loss mask as they are, weighted by the episode's final
// reward. Turns that failed (finish reason "error") are left out.
func TurnSamples(turns []data.Turn) []Sample {
	var out []Sample
	for _, t := range turns {
		if t.FinishReason == "error" || len(t.ResponseIDs) == 0 {
			continue
		}
		out = append(out, Sample{Prompt: t.PromptIDs, Response: t.ResponseIDs, Mask: t.LossMask,
			Reward: t.FinalReward, Episode: t.EpisodeID, Step: int(t.Turn)})
	}
	return out
}

// ReadSamples reads the samples of a trajectory file: JSONL episodes
// (.jsonl) or a run's Arrow trajectory file (.arrow).
func ReadSamples(path string, tok *tokenizer.Tokenizer, maxLen int) ([]Sample, error) {
	switch {
	case strings.HasSuffix(path, ".jsonl"):
		eps, err := ReadJSONL(path)
		if err != nil {
			return nil, err
		}
		return EpisodeSamples(path, eps, tok, maxLen)
	case strings.HasSuffix(path, ".arrow"):
		turns, err := data.ReadTrajectoryFile(path)
		if err != nil {
			return nil, err
		}
		for i := range turns {
			if err := turns[i].Check(); err != nil {
				return nil, fmt.Errorf("%s: %w", path, err)
			}
		}
		s := TurnSamples(turns)
		for _, x := range s {
			if maxLen > 0 && len(x.Prompt)+len(x.Response) > maxLen {
				return nil, fmt.Errorf("%s: episode %s turn %d: %d tokens, more than the model's context of %d tokens", path, x.Episode, x.Step, len(x.Prompt)+len(x.Response), maxLen)
			}
		}
		return s, nil
	}
	return nil, fmt.Errorf("%s: want a .jsonl file of episodes or an .arrow trajectory file", path)
}

// Filter keeps the samples whose reward is at least threshold (success
// filtering; reward-weighted SFT's filter weighting).
func Filter(samples []Sample, threshold float64) []Sample {
	var out []Sample
	for _, s := range samples {
		if s.Reward >= threshold {
			out = append(out, s)
		}
	}
	return out
}

func toInt32(ids []int) []int32 {
	out := make([]int32, len(ids))
	for i, id := range ids {
		out[i] = int32(id)
	}
	return out
}

func ones(n int) []float32 {
	out := make([]float32, n)
	for i := range out {
		out[i] = 1
	}
	return out
}
