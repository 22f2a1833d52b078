// Package simlm is a scripted stand-in for a small executor model: an
// engine.Engine that reads the workflow executor's prompts (its role,
// tools, token budget and prompt atoms) and answers the built-in word
// problems and arithmetic questions the way a weak model would. It does
// arithmetic "in its head" with an error rate that grows with the size of
// the numbers, writes real <tool_call> requests when it has tools and
// uses the results the executor sends back (so a calculator genuinely
// fixes its arithmetic), checks reasoning as a verifier with a chance of
// catching mistakes, and is cut off at the request's max_tokens like any
// engine. Its behaviour is a documented, seeded function of the prompt —
// not a trained network — so context-optimization runs finish in minutes
// on a CPU and their results are reproducible.
package simlm
