// Package recipes holds the recipe schema and its validation, the built-in
// recipe files, and the driver that places actors and runs the training loop.
package recipes
