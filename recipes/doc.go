// Package recipes holds the recipe schema and its validation, the built-in
// recipe files, and (in recipes/driver) the driver that places actors and
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
// Not done yet: the mapping from Recipe onto the driver's configuration
// (recipes/driver), and the schema's semantics that only the driver can
// give (stop_gradient, feedback_reward, placement modes) are documented in
// SCHEMA.md but enforced by nothing until then. The built-in recipes'
// hyper-parameters are first guesses, not tuned by a run.
package recipes
