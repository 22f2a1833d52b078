// Package buildinfo names the build a binary came from, as the Go toolchain
// recorded it: the module version and the VCS revision.
package buildinfo

import "runtime/debug"

// String is "VERSION (REVISION)", "VERSION (REVISION, modified)" for a
// tree with uncommitted changes, or "VERSION" where no revision was
// recorded (go run, go test); VERSION is "(devel)" for a build from a
// checkout. REVISION is the commit's first 12 hex digits.
func String() string {
	v, rev, dirty := "(devel)", "", false
	if bi, ok := debug.ReadBuildInfo(); ok {
		if bi.Main.Version != "" {
			v = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	switch {
	case rev != "" && dirty:
		return v + " (" + rev + ", modified)"
	case rev != "":
		return v + " (" + rev + ")"
	}
	return v
}
