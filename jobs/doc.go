// Package jobs runs training runs as cluster jobs, as Ray's job
// submission does: `rlnode submit` hands a resolved recipe to a node, and
// a detached job actor on some node of the cluster runs `rlnode run` for
// it as a child process, its driver. The job outlives the submitter's
// session and host; when the job's node is lost or stops, the cluster
// restarts the job actor on another node, which continues the run with
// --resume from its newest checkpoint (the run folder must then be on a
// filesystem both nodes see: a node that does not see it refuses the job,
// which goes to another node or fails naming the command that continues
// it, rather than start the run over).
//
// It owns the job actor, the child process and its log (RUN/job.log), and
// the node's job routes on its control endpoint with their client. It
// does not read or check recipes (the CLI checks them before it submits,
// the child again) and imports nothing of training.
package jobs
