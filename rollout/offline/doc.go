// Package offline holds trajectories produced outside a training run:
// the JSONL format of agent episodes (Episode: chat messages with each
// step's action and reward), Collect, which plays a policy without a model
// (a scripted teacher, random play) in an environment to write such files,
// and Samples, which turns a JSONL file or an Arrow trajectory file of a
// run into token-level examples for SFT and reward-weighted SFT.
package offline
