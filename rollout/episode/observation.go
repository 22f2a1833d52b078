package episode

import "github.com/rlnode/rlnode/rollout/env"

// ObservationMessage is the user message the agent episode shows for obs
// under the default Limits: its text, the valid actions and how to write
// one. Trajectories collected without a model use it, so that their chats
// read as the agent episode's do.
func ObservationMessage(obs env.Observation) string {
	return renderObservation(Limits{}.withDefaults(), obs)
}
