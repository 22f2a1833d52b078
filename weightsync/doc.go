// Package weightsync holds the weight-sync actor: it owns the policy version
// counter and pushes each new policy version to the registered engines.
package weightsync
