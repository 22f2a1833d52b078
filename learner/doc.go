// Package learner holds the policy model, tokenizer, tensor backends, optimizer,
// RL objectives and sharding. Its math is pure code with no network and no
// actors; only the learner actor wrapper imports package actor.
package learner
