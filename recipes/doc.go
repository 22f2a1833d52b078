// Package recipes holds the recipe schema, its decoding and validation,
// and the built-in recipe files. It imports nothing of train, learner,
// cluster or rollout: where it must name their values (task kinds, KL
// estimators, loss aggregations, the built-in tokenizer's smallest
// vocabulary, the episode templates) it keeps its own lists, which
// train's tests compare with the packages'.
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
// What needs the other packages — their own checks of the model, task,
// templates and loss, and what the training loop cannot run yet — is
// train.Check, which reports through Loaded.Refuse in the same format;
// train.FromRecipe maps a checked recipe onto the loop's configuration.
package recipes
