package train

import (
	"fmt"
	"slices"

	"github.com/rlnode/rlnode/learner"
	"github.com/rlnode/rlnode/rollout/data"
)

// BatchFromTrajectories is the learner batch of policy from one step's
// trajectories: the turns of that policy that train admits (nil: all),
// group by group in the order the groups first appear, within a group turn
// index by turn index, within a turn in the order of the rows. The rows of
// one group and turn index form one GRPO group: its id is GroupID·T + k
// for the k-th of the T turn indices the policy has in turns (admitted or
// not, so the ids do not depend on what trains). Rewards are the turns'
// Reward; Masks are set only when some token is masked out, Advantages
// only when the turns carry them (then every turn must). A turn whose
// request failed (FinishReason "error") is an error.
func BatchFromTrajectories(policy string, turns []data.Turn, train func(data.Turn) bool) (learner.Batch, error) {
	rows, groupIDs, err := trajectoryRows(policy, turns, train)
	if err != nil {
		return learner.Batch{}, err
	}
	b := learner.Batch{PolicyID: policy, GroupIDs: groupIDs}
	masked, advantages := false, false
	for _, i := range rows {
		t := &turns[i]
		b.Prompts = append(b.Prompts, slices.Clone(t.PromptIDs))
		b.Responses = append(b.Responses, slices.Clone(t.ResponseIDs))
		b.SampleLogProbs = append(b.SampleLogProbs, slices.Clone(t.LogProbs))
		b.Masks = append(b.Masks, slices.Clone(t.LossMask))
		b.Advantages = append(b.Advantages, slices.Clone(t.Advantages))
		b.Rewards = append(b.Rewards, t.Reward)
		masked = masked || slices.ContainsFunc(t.LossMask, func(m float32) bool { return m != 1 })
		advantages = advantages || t.Advantages != nil
	}
	if !masked {
		b.Masks = nil
	}
	if !advantages {
		b.Advantages = nil
	} else if i := slices.IndexFunc(b.Advantages, func(a []float32) bool { return a == nil }); i >= 0 {
		return learner.Batch{}, fmt.Errorf("policy %s: sequence %d has no advantages, others have", policy, i)
	}
	return b, nil
}

// trajectoryRows are the indices in turns of the rows of policy's batch
// that train admits, in BatchFromTrajectories's order, with each row's
// GRPO group id.
func trajectoryRows(policy string, turns []data.Turn, train func(data.Turn) bool) (rows []int, groupIDs []int64, err error) {
	var indices []int32 // the policy's turn indices, ascending
	var groups []int64  // in order of first appearance
	byKey := map[[2]int64][]int{}
	for i, t := range turns {
		if t.PolicyID != policy {
			continue
		}
		if t.FinishReason == "error" {
			return nil, nil, fmt.Errorf("policy %s: episode %s turn %d failed: %s", policy, t.EpisodeID, t.Turn, t.Note)
		}
		if err := t.Check(); err != nil {
			return nil, nil, fmt.Errorf("policy %s: %w", policy, err)
		}
		if k, found := slices.BinarySearch(indices, t.Turn); !found {
			indices = slices.Insert(indices, k, t.Turn)
		}
		key := [2]int64{t.GroupID, int64(t.Turn)}
		if _, seen := byKey[[2]int64{t.GroupID, -1}]; !seen {
			byKey[[2]int64{t.GroupID, -1}] = nil
			groups = append(groups, t.GroupID)
		}
		if train == nil || train(t) {
			byKey[key] = append(byKey[key], i)
		}
	}
	for _, g := range groups {
		for k, turn := range indices {
			for _, i := range byKey[[2]int64{g, int64(turn)}] {
				rows = append(rows, i)
				groupIDs = append(groupIDs, g*int64(len(indices))+int64(k))
			}
		}
	}
	return rows, groupIDs, nil
}

// episodeOutcome is what a step's metrics read of one episode: its group,
// the score of its first answer and of its last.
type episodeOutcome struct {
	group        int64
	first, final float64
	finalLen     int // response tokens of the solver's last turn
}

// outcomes are the episodes of turns (rows of one episode next to each
// other, in turn order), in order.
func outcomes(turns []data.Turn, solver string) []episodeOutcome {
	var out []episodeOutcome
	for i, t := range turns {
		if i == 0 || t.EpisodeID != turns[i-1].EpisodeID {
			out = append(out, episodeOutcome{group: t.GroupID, first: t.Reward, final: t.FinalReward})
		}
		if t.PolicyID == solver {
			out[len(out)-1].finalLen = len(t.ResponseIDs)
		}
	}
	return out
}

// rlStepMetrics fills the metrics of an RL step's episodes: the mean
// final and first reward, the final answers' mean length, and the share
// of groups whose episodes all (none) ended with reward 1.
func rlStepMetrics(m *Metrics, eps []episodeOutcome, groupSize int) (final, first float64) {
	var lenSum float64
	var groups, allRight, noneRight int
	right := 0
	for j, e := range eps {
		first += e.first
		final += e.final
		lenSum += float64(e.finalLen)
		if e.final == 1 {
			right++
		}
		if j+1 == len(eps) || eps[j+1].group != e.group {
			groups++
			switch right {
			case groupSize:
				allRight++
			case 0:
				noneRight++
			}
			right = 0
		}
	}
	n := float64(len(eps))
	m.ResponseLenMean = lenSum / n
	m.SolvedAllFrac = float64(allRight) / float64(groups)
	m.SolvedNoneFrac = float64(noneRight) / float64(groups)
	return final / n, first / n
}
