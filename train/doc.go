// Package driver runs the training loop: it places the learner actor
// (package learner; or learner/shard ranks) on the cluster — an embedded single-node cluster when
// none is given — starts the native engine (rollout/native) in this
// process, and loops: draw prompts from the synthetic task (rollout/task)
// or a dataset (Config.Dataset, data.go), generate GroupSize samples per
// prompt, score them with the run's verifier (rollout/verify: math, gsm8k
// or code; verify.go), train on the batch, push the new weights to the
// engine through the policy's weightsync.PolicyServer (learner weights
// offered over the bulk path, then native.Engine.SetWeights), evaluate accuracy on held-out problems
// every k steps (greedy, or sampled: below), write metrics.jsonl and checkpoints under
// Out/checkpoints/step-N/ (learner checkpoint, tokenizer.json,
// driver_state.json). An SFT warm-up on generated problems with their
// worked answers runs first, so rewards start above zero. Every episode
// type (single, MLMT, SCoRe, tools) plays through rollout/episode
// (episodes.go), in training and evaluation; its turns, rollout/data's
// trajectories, become each policy's learner batch in
// BatchFromTrajectories (trajectory.go). Config is a plain
// struct; recipes map onto it, and Quickstart is the tuned preset.
//
// With Config.Rollout (rollout.go) a policy generates on rollout actors
// instead (a weightsync.RolloutServer): a rollout.Pool of Replicas actors placed per their resources
// (or a spread placement group), hosting the native engine built from the
// model's config.json, tokenizer and engine settings sent with the spawn
// (rollout.ActorConfig.ModelFiles), and a weightsync.Syncer that holds the
// learner's starting weights (weightsync.Syncer.Keep) and pushes them to each
// actor when it registers, then each learner step's weights to all of
// them at once (the driver pulls them from the learner over the bulk
// path, as for the in-process engine; a single-turn warm-up pushes only
// before evaluations). No node hosting an actor reads the run directory
// (TestRunSurvivesRolloutNodeKill hides it from them). Training batches
// and evaluation generate there; MLMT's feedback policy too with
// Config.FeedbackRollout. A lost actor's chunks run again on the others
// (metrics: rollout_regenerated, rollout_live), and the pool starts a
// replacement where placement allows, registered at the version published
// by then (rollout_replaced); while no node can host one the run goes on
// with fewer (said once in the run's log) and the pool retries every 2 s.
// A push that fails drops the actor the same way; a version no actor took
// is kept for the replacements (weightsync.Syncer.Keep), and with every
// actor lost generation waits up to a minute for one. With MaxStaleness k > 0 the
// batches of the next k steps are drawn (in step order: the cursor and
// sampling seeds of a synchronous run) and generated one after another
// (multi-turn: all turns of their episodes, on both policies' actors;
// episodes.go) while the current step trains, a pipeline k
// batches deep (rollout.go); the pools' bound holds each batch's samples
// to versions ≥ on-policy − k, the driver checks every step's lag against
// k again (more stops the run), and metrics.jsonl's weight_lag is each
// step's lag (0 when synchronous). The checkpoint's data cursor leaves
// every batch drawn ahead out, so a resumed run draws them again
// (TestAsyncPipelineDeep: with training held until the batches ahead
// have generated, step i's lag is exactly min(i−1, k), for k = 2, 3
// single-turn, 2 for MLMT and on vLLM servers). Measured (`rlnode run
// quickstart --set deterministic=false --set sync.mode=async --set
// sync.max_staleness=K --set engines.policy.replicas=2 --set
// sft.steps=60 --set schedule.steps=100 --set eval.held_out=32`, this
// shared 2-core machine, three rounds one run at a time, load 5–10): RL
// tokens per second over the 100 steps (elapsed_s from the last warm-up
// step to the last RL step) 2,068, 3,108 and 4,856 with k = 1; 2,087,
// 3,045 and 4,449 with k = 2; in the third round sync.mode=sync made
// 3,490. weight_lag was 1 on 99 steps with k = 1 and 2 on 98 with k = 2
// (0, 1, then k). Generation (0.13–0.35 s a step) is faster than
// training (0.31–0.74 s), so the pipeline stays full and the lag sits at
// k, but training bounds the step time once k = 1 hides generation: on
// these 2 cores k = 2 gains nothing over k = 1. Synchronous runs on actors give the same
// weights as in-process ones (TestRolloutRunsRepeat).
//
// Measured on the shared 2-core machine, embedded cluster, quickstart with
// `--set deterministic=false --set schedule.steps=200` (300 warm-up + 200
// GRPO steps, seed 1), two rounds one run at a time, wall seconds of
// `rlnode run`: in-process 92.8/86.2, final eval 0.234; two rollout
// actors 77.7/89.6, 0.234 (the same weights byte for byte; the actors
// skip 299 warm-up pushes the in-process engine takes); two actors async
// k=1 71.4/79.0, 0.129; one actor async k=1 59.2/57.8, 0.129 (the same
// weights as two). Post-warm-up eval 0.148 in all; both async runs had
// weight_lag 1 on 199 of 200 steps, and matched the synchronous runs'
// 0.215 at step 475 before the last evaluation. One seed: not a study.
//
// Quickstart now runs 1,200 GRPO steps (was 800). At the end of session
// 2, `go run ./cmd/rlnode run quickstart` uninterrupted on a quiet machine
// (seed 1, deterministic): 0.148 after warm-up, 0.191 at RL step 200,
// 0.305 at 500, 0.301 at 800, 0.402 at 1,000, 0.391 at the end (+24;
// 0.31–0.43 over the last 300 steps), 318 s. An earlier build of the same
// session ended at 0.328 after 800 RL steps (+18, short of +20, which is
// why the RL phase grew). Runs repeat bit for bit with one binary; kernel
// changes move the numbers.
//
// Earlier measurements, before the kernel work and on the shared 2-core
// machine beside other engineers' jobs (wall times are noisy). Level-1 arithmetic has 1,365 questions (operands
// 1..30), so the 256 held-out questions test the rule, not recall.
// `RLNODE_QUICKSTART=DIR go test ./train -run TestQuickstartLearns
// -v` (Quickstart, seed 1, 300 warm-up + 800 GRPO steps, 361 s): greedy
// held-out accuracy 0.152 after warm-up (31 s), 0.305 at RL step 150
// (95 s), 0.344 at 300 (166 s), 0.383 at 500 (258 s), 0.418 at 700
// (327 s), 0.375 at the end (361 s): +22 points, and 0.32–0.42 over the
// last 300 steps. The same settings through a scratch harness, two runs
// at a time: seed 1 0.152 → 0.484 (379 s; 0.30–0.40 before the last
// evaluation), seed 2 0.152 → 0.375 (377 s; peak 0.426). Other settings
// measured: lr 3e-4 after 400 warm-up steps, seed 1 0.148 → 0.270 at 600
// RL steps (peak 0.359), seed 2 0.289 → 0.441; lr 2e-4 after 300 warm-up
// steps 0.152 → 0.297 by RL step 425; lr 1e-3 collapsed (0.148 → 0.07);
// 100 warm-up steps left the sampled reward near 0.05 and GRPO barely
// moved it (0.09 → 0.07–0.10 by RL step 275). Plain SFT keeps improving
// too (0.58 after 600 SFT steps), so the curve shows GRPO learning from
// reward, not that it beats more SFT. Those long runs were not
// bit-reproducible (a parallel reduction: the test run and the harness run
// of seed 1 parted after RL step 450); since then the CPU kernels add
// partial sums in chunk order and runs with deterministic: true repeat.
//
// Datasets and verifiers (data.go, verify.go): a dataset (JSONL or
// Parquet through rollout/data, with a column mapping) replaces the task
// for single-turn episodes. It is loaded and every row checked in Run
// before the cluster starts (errors name the file, row, line and column).
// Training problem i is row perm_e[i mod n] of the train rows, perm_e the
// seeded permutation of epoch e = i/n, so driver_state.json's data cursor
// is the whole data state and --resume continues it. Evaluation takes the
// eval file's first EvalProblems rows or, without one, EvalProblems rows
// held out of the train file by a seeded choice (never trained on; the
// file must have more rows). The code verifier runs each program in
// rollout/verify's sandbox (bwrap where it works, else rlimits) with
// verify.DefaultLimits — 10 s wall clock with the process group killed,
// 3 s per test, 5 CPU s, 512 MiB, 32 processes — so a hanging program
// costs one worker at most 10 s; a step's verifications run on
// VerifyWorkers goroutines (default: the cores for code, 1 for math). With
// code, the dataset's answer column is the reference program the SFT
// warm-up trains on. Measured (`go run ./cmd/rlnode run mbpp --set
// schedule.steps=3`, the shipped 16-problem file, 12 trained on and 4 held
// out): after 100 SFT steps on the reference programs the RL rewards are
// 0.56–0.75 on training problems and the held-out eval is 0.000 — the
// tiny model recalls programs, it does not learn to code. The whole
// recipe (`go run ./cmd/rlnode run mbpp`: 100 SFT + 20 GRPO steps at lr
// 1e-4, 18 s by elapsed_s) keeps the RL reward at 0.50–0.81 (mean 0.65),
// held-out eval 0.000 throughout; at lr 5e-4 the reward fell to 0.13–0.56
// by the last 10 steps. grpo_gsm8k
// (`go run ./cmd/rlnode run grpo_gsm8k`: the word task, level 1, the gsm8k
// verifier, 300 SFT + 250 GRPO steps of 32 prompts × 8 at lr 2e-4 with
// clip-higher 0.28; 152 s by elapsed_s, 2 m 50 s wall with the build):
// greedy eval on 200 held-out problems 0.375 after warm-up, 0.385–0.410
// during RL, 0.410 at the end; the sampled reward went from 0.225 (mean of
// the first 25 RL steps) to 0.332 (last 25). A weak signal, one seed. The
// recipe's earlier settings (8 prompts, lr 5e-4, 150 steps) gave 0.375 →
// 0.395 (dipping to 0.315); lr 1e-4 0.375 → 0.390 (peak 0.425); a hidden
// size of 128 only 0.275 after the same warm-up, 0.260 at the end.
//
// Multi-turn episodes (Config.Episode; recipes mlmt_math, its stopgrad and
// static variants, mlmt_gsm8k, score_math) are played by the driver itself
// with plain text prompts rendered from its templates (rollout/episode's
// runners use chat messages and data.Example, which carries no hidden
// hint), on the task's problems or a dataset's (the same order, cursor,
// resume and held-out split as single-turn), every turn scored by the
// run's verifier (math, gsm8k, or code in the sandbox):
//   - MLMT: turn 1 the solver answers (GroupSize samples per prompt), turn
//     2 the feedback policy — its own learner actor and native engine,
//     seeded Seed+1 — writes feedback seeing the problem, the Hint (the
//     task's, or a dataset's hint column: Dataset.HintColumn, the
//     recipe's data.dataset.columns.hint, default "hint", read and
//     required in every row, before the cluster starts,
//     only when a feedback template uses .Hint; multiturn_data.go) and the
//     attempt (or the static text, with no feedback policy), turn
//     3 the solver refines. The solver trains on turn 1 (its own score)
//     and turn 3 (the final score) as two GRPO groups per prompt; the
//     stop-gradient variant drops the turn-3 rows (the recipe schema's
//     meaning: the solver learns from its first attempt only, the
//     feedback policy still learns from the refined answer); the feedback
//     policy trains on the final score or its improvement over turn 1.
//     FreezeSolver (the recipe's algorithm.mlmt.train: [feedback]) trains
//     the feedback policy alone: the solver is warmed up, then plays its
//     turns without RL steps.
//   - SCoRe: turn 2 sees the first prompt, the first answer and the review
//     instruction; both turns train, turn 2 on r2 + α(r2 − r1).
//   - PPO: each policy's learner has its own value head; every turn's
//     response is a sequence of its own with that turn's reward (the ones
//     above) on its last token and GAE over it, as single-turn PPO: no
//     value is bootstrapped across turns, so turn 1's target is its own
//     score, not the episode's final one. MLMT's feedback policy trains
//     with its own algorithm and learning rate when FeedbackPolicy's
//     Algorithm and LR are set (the recipe's algorithm.mlmt.feedback_algorithm
//     and feedback_lr; e.g. the solver on PPO, the feedback policy on
//     GRPO), its learner built with a value head only for PPO; the other
//     learner settings are Learner's, shared.
//   - The warm-up samples the solver's first attempts from its current
//     weights and trains the solver on the reference answer after both of
//     its prompts and the feedback policy on FeedbackAnswerTemplate.
//   - Eval steps play the episode greedily on the held-out problems:
//     turn1_accuracy, turn3_accuracy (score: turn2_accuracy), delta,
//     incorrect_to_correct, correct_to_incorrect, and with a feedback
//     policy turn3_accuracy_static (the same solver with the static text);
//     eval_accuracy is the final turn's. EvaluateCheckpoint is the same
//     evaluation from a checkpoint (rlnode eval). Sampled evaluations play
//     n episodes per problem (below).
//   - Checkpoints: step-N/ is the solver, as in single-turn runs;
//     step-N/feedback/ the feedback policy in the same layout. Resume
//     restores both.
//
// The MLMT-RL proof, measured on the shared 2-core machine (seed 1, same
// budget: 150 warm-up + 200 GRPO steps of 16 prompts × 8 episodes; greedy
// on 256 held-out pick problems; run one after the other).
// `go run ./cmd/rlnode run mlmt_math` (242 s by elapsed_s): after warm-up
// turn-1 0.133, turn-3 0.461; at the end turn-1 0.367, turn-3 0.695 (Δ
// +0.328; incorrect→correct 0.465, correct→incorrect 0.137).
// `go run ./cmd/rlnode run mlmt_math_static` (101 s): after warm-up
// turn-1 0.121, turn-3 0.125; at the end turn-1 0.281, turn-3 0.281
// (exactly the share of 3rd-position hints, 72 of 256: it looks like a
// constant guess, not checked sample by sample). rlnode eval on both final
// checkpoints gives the same figures. An earlier pair of runs, before the
// sampling seeds were hashed (same settings otherwise): mlmt_math turn-1
// 0.383, turn-3 0.836; mlmt_math_static turn-1 0.180, turn-3 0.160.
// Alone the solver cannot beat always naming the most common hinted
// position (2nd: 100 of the 256 held-out problems, 0.39), so the gain
// above that is the feedback's information; the trained run's
// turn3_accuracy_static (its solver given the static text) is 0.008: it
// relies on feedback. The stop-gradient variant (mlmt_math_stopgrad, 150
// s) trains the solver on turn 1 only: turn-1 0.133 → 0.387, turn-3 0.461
// → 0.453 (0.42–0.49 on the way); with the earlier seeds turn-3 fell
// 0.469 → 0.363. One or two runs per variant: not a seed study.
// score_math (300 warm-up + 400 GRPO steps on level-1 arithmetic, 234 s):
// turn-1 0.094 → 0.098, turn-2 0.113 → 0.113 (0.11–0.16 on the way): no
// measurable self-correction gain at this scale.
// mlmt_gsm8k (`rlnode run mlmt_gsm8k`, the binary built beforehand: 600
// warm-up + 150 GRPO steps of 16 prompts × 8 episodes on the shipped
// 3,000-row word-problem file, greedy on its 200 test rows, seed 1;
// 161 s wall at load 2–4, 229 s under heavier load): after the warm-up
// turn-1 0.445, turn-3 0.490 (static text 0.325); at the end turn-1
// 0.525, turn-3 0.520 (Δ −0.005; incorrect→correct 0.050,
// correct→incorrect 0.055), turn3_accuracy_static 0.355; rlnode eval on
// the last checkpoint gives the same figures. Sampled rewards, mean of
// the first and last 25 RL steps: turn 1 0.327 → 0.421, final 0.312 →
// 0.422. RL raised both turns together; the trained feedback beats the
// static text by 0.165 on turn 3 but does not lift turn 3 above turn 1.
// The feedback policy sees no more than the solver; its warm-up target
// is a verdict on the attempt. With the reference answer as that target
// instead (the recipe's first form, 278 s), the solver learned to copy
// feedback no better than itself: turn-1 0.510 → 0.620, turn-3 0.290 →
// 0.435 (correct→incorrect 0.210 at the end); with 300 warm-up and 100
// RL steps (127 s) 0.175 and 0.165 after the warm-up, 0.270 and 0.125 at
// the end. One seed each.
//
// Sampled evaluation (Config.EvalSampling, the recipe's eval.samples,
// eval.temperature and eval.pass_k; evalsample.go): n answers per held-out
// problem at temperature T > 0, each its own request with a seed hashed
// from (Seed, problem ID, answer index, turn), so the figures do not depend
// on the engine (in-process, rollout actors, vLLM), the batching or the
// actor that serves an answer, and every evaluation of a run (and rlnode
// eval of its checkpoints) uses the same seeds. eval_accuracy is mean@n
// (the mean reward over all answers); metrics.jsonl adds eval_samples,
// eval_temperature, eval_pass_at_K per k (the unbiased estimator of Chen et
// al. 2021; default k = 1 and n) and eval_maj_at_N (majority vote over the
// answers the math or gsm8k verifier extracts, classes by
// verify.Equivalent, ties to the first seen; none with code). Multi-turn:
// turn accuracies and flip rates over all n episodes per problem, pass@k
// and maj@n of the final turn; the static-feedback comparison reuses the
// final turn's seeds. Greedy evaluations (the default) send and write
// exactly what they did before. Tested: the estimator on hand-worked
// numbers, two runs with one seed, the checkpoint evaluated again, served
// in chunks out of order, and on two rollout actors, all with equal
// figures; seeds that collide across answers, or no seeds, fail those
// tests.
//
// Sharded learner (Learner.Shards > 1, the recipe's
// placement.learner_shards): each trained policy's learner (MLMT: the
// feedback policy's too) runs as that many learner/shard ranks (ZeRO-1) in
// a SPREAD placement group of LearnerResources per rank
// (shard.StartGroup, which also places a single learner actor, so the loop
// sees one type either way). When a learner fails — a rank lost (actor stopped or
// node dead: the step fails in milliseconds, as shard.Group aborts the
// survivors' collectives) or any other learner error — every policy's
// learner restarts from the run's last checkpoint (else the --resume one,
// else the initial weights): shard.PlacedGroup.Restart respawns lost ranks
// (in their bundle, or in a new placement group when their node is gone)
// and restarts the group; step, data cursor and weight version
// come from the checkpoint's driver_state.json; the engines are replaced,
// as they refuse older weight versions: an in-process engine is started
// anew and fed the restored weights, rollout actors are replaced by a new
// pool and weight syncer loading the restored learner's weights at the
// checkpoint's version (startRollout again), and an asynchronous run's
// batches drawn ahead are dropped (the checkpoint's cursor leaves them out); and
// metrics.jsonl is cut back to the checkpoint's step, so a redone step is
// logged once (Progress and OnWeights do see it twice). The same step
// failing again ends the run. --resume takes any shard count and cuts
// metrics.jsonl back to the checkpoint's step the same way. Tested:
// tinyRun with 2 shards ends 2.5e-7 from the 1-learner run's weights
// after 5 steps (same generation: equal rewards), within 2e-5; with
// rollout actors and 2 shards, a rank lost mid-run replaces the pool and
// the run ends at the uninterrupted run's weights (sync; async: the
// prefetched batch stays out of the cursor), for MLMT both policies'
// pools (TestRolloutActorsShardRankLost,
// TestMLMTRolloutActorsFeedbackRankLost). `rlnode run quickstart --set
// sft.steps=60 --set schedule.steps=60 --set eval.held_out=32 --set
// engines.policy.replicas=2` with placement.learner_shards 1 and 2 (one
// run each, embedded cluster): wall 25.9 and 27.4 s, the same 60 RL
// rewards, tokens (100,584) and last loss.
// Measured (the quickstart recipe with --set sft.steps=60 schedule.steps=60
// eval.held_out=32, embedded cluster, this shared 2-core machine at load
// 2.6–4, three runs each, interleaved): wall 21.3, 21.7, 23.8 s with one
// learner; 17.6, 15.2, 23.0 s with placement.learner_shards=2. Training
// tokens/s over the 60 RL steps (100,584 tokens, equal in both: the same
// samples) 8,365, 8,206, 8,054 against 11,244, 13,475, 8,232; over the
// warm-up 10,000, 9,827, 6,306 against 9,845, 12,349, 6,844. Noisy; two
// ranks are not slower here, at most ~1.5x faster.
//
// PPO (Config.Learner.Algorithm ppo; multi-turn above): the learner adds a
// value head on the policy's trunk (TRL's v_head.summary names), puts the
// verifier's reward on the last response token, runs GAE over the
// response with the critic's values from a pre-pass, whitens the
// advantages over the batch, and trains the clipped policy and value
// losses together; a KL term (Loss.KLCoef) is a loss term, or with
// Learner.KLInReward a per-token reward penalty before GAE. Epochs ×
// MiniBatches optimizer steps make one run step: metrics.jsonl's step,
// the weight versions and checkpoints count run steps (Train calls).
// Checkpoints carry the value head; engines load them and ignore it, and
// weight pushes leave it out. RL steps add value_loss, value_clip_frac and
// explained_var to metrics.jsonl. Measured: the ppo_math recipe
// (quickstart with PPO, 600 RL steps, seed 1, deterministic) on this
// shared 2-core machine: held-out 0.148 after the warm-up, 0.297 after 600
// PPO steps (+15 points; 0.289 at RL step 450); `go run ./cmd/rlnode run
// ppo_math` took 3 m 18 s wall (195 s elapsed_s at the last step; an
// earlier run of the same settings, with the same metrics line for line,
// 246 s under heavier load); explained variance
// stayed within ±0.04 (the critic predicts little beyond the mean reward
// at this scale). One seed, untuned beyond quickstart's settings.
//
// vLLM engines (Config.VLLM, vllm.go): the solver generates on running
// vLLM servers through a rollout/vllm client in this process, and each
// learner step's checkpoint, written to a directory the servers read, is
// reloaded by every server before the next generation (checked per
// server). MLMT's trainable feedback policy does the same on servers of
// its own (Config.FeedbackVLLM, Out/vllm-weights-feedback). With
// MaxStaleness k > 0 (single-turn) the next step's batch generates while
// a step trains: the reload waits for the requests in flight, which keep
// the version they were sent under (the client's per-request tag), holds
// new ones until every server serves the new version, and a result older
// than on-policy − k stops the run (weight_lag as on rollout actors). Tested against fake servers (rollout/vllm/vllmtest) that
// answer with vLLM's documented shapes but cannot learn: the tests check
// plumbing (requests on both servers, one reload per step with its
// directory, a server lost mid-run, unconfirmed reloads, PPO's value head
// left out of what the servers load), not learning;
// no run against a real vLLM has been made.
//
// LoRA (Learner.LoRA, FeedbackPolicy.LoRA; lora.go): the warm-up trains
// every weight, the RL steps only the adapters; weight sync moves the
// adapters (merged onto the base by the in-process engine and by each
// rollout actor; a PEFT directory loaded in place by vLLM servers);
// checkpoints are base + PEFT adapter, served merged by evaluation.
//
// Not done yet: vLLM runs no rollout actors (the servers
// are the replicas), and asynchronous runs on it are single-turn; a lost
// rollout actor's replacement keeps the resources of a spread group's
// bundle but not the spread; a learner restart replaces all rollout actors rather than
// resetting their weight version (they reload the model); an
// asynchronous run's batches ahead generate one after another (multi-turn:
// a batch's turns run one after another, not interleaved with other
// steps'); single-turn episodes use the driver's own short prompt format;
// both MLMT policies share one learner config but for the algorithm and
// learning rate; the sandbox's limits and mode are not
// recipe fields; the progress bar is the CLI's (cmd/rlnode), curves.png
// (curves.go) and the Prometheus exporter (metrics_prom.go) are here; sharded learners: ZeRO stage and
// collective timeout (LearnerTimeout) are not recipe fields (ZeRO-1,
// 60 s), one shard count for both MLMT policies, and a rank that dies
// between steps is noticed at the next learner call.
package train
