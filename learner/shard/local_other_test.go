//go:build !linux

package shard

import "testing"

func socketOf(*testing.T, int) string { return "" }

func noSegmentDescriptors(*testing.T, int) {}

func wantGradients(*testing.T, *Group, int)         {}
func sharedSegmentsOf(*testing.T, int, int, string) {}
