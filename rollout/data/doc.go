// Package data owns the rollout's data at rest: datasets read from JSONL
// and Parquet files (Hugging Face datasets ship Parquet) with a column
// mapping into Examples, a seeded epoch Sampler, and trajectory batches as
// Arrow record batches (TrajectorySchema) written to and read from Arrow
// IPC files.
//
// It does no generation and no networking: episodes produce Turns, the
// rollout actor ships their IPC bytes, the learner reads them.
package data
