// Package ctxopt learns, per question, how to configure the agent that
// answers it while the language model stays fixed: the workflow structure
// (direct; reason → answer; reason → verify → answer), the tools and token
// budget of every agent, and the prompt atoms each agent gets. A small
// policy network picks the configuration from a question embedding, the
// workflow executor runs it against an engine and scores it with a
// verifier, and PPO (learner/rl's clipped loss, GAE and value loss,
// learner/optim's AdamW) maximises correctness minus cost. Three
// formulations: a contextual bandit, a multi-step MDP, and a hierarchical
// pair of structure and prompt policies.
package ctxopt
