package cluster

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Running lists the nodes running on this host, from the run files their
// control endpoints write under Home()/run (dir), sorted by gossip
// address. Files whose process is gone are left out: RunFiles lists them.
func Running() (dir string, infos []RunInfo, err error) {
	dir, all, err := RunFiles()
	for _, ri := range all {
		if ri.Gone == "" {
			infos = append(infos, ri)
		}
	}
	return dir, infos, err
}

// RunFiles lists every run file under Home()/run (dir), sorted by gossip
// address, live nodes and stale files alike: a stale file's RunInfo.Gone
// says why its node is gone. A node killed with SIGKILL, or one that
// crashed, leaves its run file behind; RemoveStale removes it.
func RunFiles() (dir string, infos []RunInfo, err error) {
	dir = filepath.Join(Home(), "run")
	entries, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return dir, nil, fmt.Errorf("read %s: %w", dir, err)
	}
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".json") {
			continue
		}
		path := filepath.Join(dir, e.Name())
		b, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		var ri RunInfo
		if json.Unmarshal(b, &ri) != nil {
			continue
		}
		ri.File = path
		ri.Gone = processGone(ri.PID, ri.ProcessStart)
		if ri.Gone == "" {
			if tok, err := os.ReadFile(tokenFileOf(path)); err == nil {
				ri.Token = strings.TrimSpace(string(tok))
			}
		}
		infos = append(infos, ri)
	}
	sort.Slice(infos, func(i, j int) bool { return infos[i].Gossip < infos[j].Gossip })
	return dir, infos, nil
}

func tokenFileOf(runFile string) string { return strings.TrimSuffix(runFile, ".json") + ".token" }

// RemoveStale removes the run file (and token file) of a node that is
// gone (RunInfo.Gone, from RunFiles), unless the file changed since: a
// node started again under the same id has rewritten it.
func RemoveStale(ri RunInfo) error {
	if ri.Gone == "" || ri.File == "" {
		return fmt.Errorf("run file %s: node %s is not gone", ri.File, ri.NodeID)
	}
	b, err := os.ReadFile(ri.File)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var now RunInfo
	if json.Unmarshal(b, &now) != nil || now.PID != ri.PID || now.ProcessStart != ri.ProcessStart ||
		processGone(now.PID, now.ProcessStart) == "" {
		return fmt.Errorf("run file %s: rewritten meanwhile (node %s runs again?); left in place", ri.File, ri.NodeID)
	}
	for _, p := range []string{ri.File, tokenFileOf(ri.File), ri.File + ".tmp", tokenFileOf(ri.File) + ".tmp"} {
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	return nil
}

// processGone says why the process that wrote a run file (pid, and its
// start time when the file has it) no longer runs, or "" while it does
// (or where this host cannot tell: no /proc).
func processGone(pid int, start string) string {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		return "" // no /proc here: cannot tell
	}
	if pid <= 0 {
		return fmt.Sprintf("its run file names no process (pid %d)", pid)
	}
	now, err := processStart(pid)
	if errors.Is(err, errProcessExited) {
		return fmt.Sprintf("process %d is not running (it has exited; its parent has not reaped it yet)", pid)
	}
	if err != nil {
		return fmt.Sprintf("process %d is not running", pid)
	}
	if start != "" && now != start {
		comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		return fmt.Sprintf("pid %d now belongs to another process (%s), started after the node", pid, strings.TrimSpace(string(comm)))
	}
	return ""
}

// errProcessExited: the process has exited but is not yet reaped (a
// zombie). Its /proc entry, start time included, stays until its parent
// waits for it, which init in a container may do late.
var errProcessExited = errors.New("process exited")

// processStart is the start time of process pid, in clock ticks after boot
// (field 22 of /proc/PID/stat): with the pid it names one process for
// good, where a pid alone is reused once the process ends. A process that
// has exited and awaits reaping is errProcessExited.
func processStart(pid int) (string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return "", err
	}
	// The command name (field 2) is in parentheses and may hold spaces
	// and parentheses: count fields after the last ")".
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return "", fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	const startField = 22 - 3 // fields after ")" begin with field 3
	if len(f) <= startField {
		return "", fmt.Errorf("/proc/%d/stat: %d fields after the command name", pid, len(f))
	}
	if f[0] == "Z" || f[0] == "X" { // field 3, the state: zombie or dead
		return "", errProcessExited
	}
	return f[startField], nil
}

// ownProcessStart is this process's start time for its run file, "" where
// it cannot be read.
func ownProcessStart() string {
	s, _ := processStart(os.Getpid())
	return s
}
