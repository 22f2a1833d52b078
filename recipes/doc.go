// Package recipes holds the recipe schema and its validation, the built-in
// recipe files, and (in train) the driver that places actors and
// runs the training loop.
//
// A recipe is a YAML file (SCHEMA.md documents every key). Load reads one
// by built-in name or path, applies --set overrides on the YAML node tree,
// decodes it strictly onto Default() with yaml.v3's Node API, fills the
// defaults that depend on other fields, and validates the result; every
// problem comes back at once as Errors, each "FILE:LINE: field.path:
// message" (or "--set a.b=c: ..."). Loaded.WriteResolved writes the recipe
// with every default filled in, which loads back to the same Recipe.
// Decoding and validation are pure: they read no network and start
// nothing; the only file access is checking that model and dataset paths
// exist, and writing the built-in recipes' data files under $RLNODE_HOME.
//
// The conversions (convert.go) give the library packages' configurations
// (model.Config, model.LoRAConfig, rl.PolicyLossConfig, SamplingParams,
// optim.WarmupCosine, task.Config, data.Mapping); validation runs their own
// checks too, so a recipe that loads is one they accept.
//
// Loaded.FromRecipe (train/recipe.go) maps a recipe onto train's
// Config (the driver's templates see .Question where rollout/episode's and
// sft.response see .Problem; its algorithm names dr_grpo and reinforce++
// are accepted here as aliases) and refuses, naming the field, what the
// driver cannot run yet. Single-turn, mlmt (algorithm.mlmt.*: train,
// stop_gradient, static_feedback, feedback_reward) and score
// (algorithm.score.alpha) episodes run. quickstart, mlmt_math and
// score_math carry the driver's tuned presets (Quickstart, MLMTMath,
// SCoReMath; tests check they agree). Generation goes on rollout actors
// (driver.Config.Rollout, placed per placement.rollout and
// engines.*.replicas) when the recipe asks for more than the in-process
// engine: engines.*.replicas > 1, placement.mode split, sync.mode async
// (single-turn: driver.Config.MaxStaleness), or placement.rollout other
// than 1 CPU; `rlnode run --address` does it on any cluster
// (Loaded.RolloutPlacement). placement.learner_shards > 1 runs each
// trained policy's learner as that many learner/shard ranks of
// placement.learner each (driver.Config.Learner.Shards).
//
// Not done yet: keys whose meaning only the driver can give and that it
// does not run yet (eval.samples > 1,
// sync.mode async for multi-turn episodes, tools episodes, datasets,
// vllm engines, lora weight sync) are validated and documented in
// SCHEMA.md but refused by FromRecipe.
// grpo_gsm8k and mbpp have untuned first-guess values.
package recipes
