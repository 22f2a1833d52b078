package main

import "github.com/rlnode/rlnode/internal/runlock"

// The run lock of a run's folder (internal/runlock).
const runLockFile = runlock.File

var lockRunDir = runlock.Lock
