package cluster

import (
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
// address; files of processes that are gone are skipped.
func Running() (dir string, infos []RunInfo, err error) {
	dir = filepath.Join(Home(), "run")
	entries, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return dir, nil, fmt.Errorf("read %s: %w", dir, err)
	}
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".json") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			continue
		}
		var ri RunInfo
		if json.Unmarshal(b, &ri) != nil || !processAlive(ri.PID) {
			continue
		}
		if tok, err := os.ReadFile(filepath.Join(dir, strings.TrimSuffix(e.Name(), ".json")+".token")); err == nil {
			ri.Token = strings.TrimSpace(string(tok))
		}
		infos = append(infos, ri)
	}
	sort.Slice(infos, func(i, j int) bool { return infos[i].Gossip < infos[j].Gossip })
	return dir, infos, nil
}
