// Package train is the training loop: it turns a recipe into a run
// (Check, FromRecipe), decides each step with a pure planner (Plan) and
// carries the plans out: episodes through rollout/episode, their
// trajectories into learner batches (BatchFromTrajectories), the learners
// placed by learner/shard, weights published through one
// weightsync.PolicyServer per policy, evaluation, checkpoints, metrics
// (metrics.jsonl, Prometheus, curves.png).
//
// It owns when things happen and the run directory; it does not open
// sockets of its own (the metrics endpoint aside), run turns itself, or
// branch on the engine kind. docs/training-loop.md explains the loop.
package train
