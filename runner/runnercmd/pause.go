package runnercmd

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"go.uber.org/zap"
)

// pauseFile is the key of the mounted ConfigMap that pauses reading.
const pauseFile = "paused"

// watchPause polls dir/paused (a mounted ConfigMap key) and pauses or
// resumes reading when it changes. Polling, not inotify, because kubelet
// updates ConfigMap volumes by swapping a symlink, which file watches miss.
// A value that cannot be read or understood keeps the state the runner is
// in: a transient read error or a typo must not resume a paused runner.
func watchPause(ctx context.Context, dir string, interval time.Duration, set func(bool), log *zap.SugaredLogger) {
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		log.Warnw("MV_CONFIG_DIR is not a readable folder yet; reading is not paused until it holds a paused key", "dir", dir, zap.Error(err))
	}
	last := false
	if p, ok := readPaused(dir, log); ok {
		last = p
	}
	set(last)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if p, ok := readPaused(dir, log); ok && p != last {
			last = p
			set(p)
		}
	}
}

// readPaused reads the pause key: paused or not, and ok=false when the
// value cannot be read or is not one of the known words, so the caller
// keeps its current state. A missing key means not paused.
func readPaused(dir string, log *zap.SugaredLogger) (paused, ok bool) {
	b, err := os.ReadFile(filepath.Join(dir, pauseFile))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return false, true
		}
		log.Warnw("cannot read the pause setting; keeping the current state", "dir", dir, zap.Error(err))
		return false, false
	}
	switch v := strings.ToLower(strings.TrimSpace(string(b))); v {
	case "true", "yes", "1":
		return true, true
	case "false", "no", "0", "":
		return false, true
	default:
		log.Warnw("unknown pause value, keeping the current state; use true or false", "file", filepath.Join(dir, pauseFile), "value", v)
		return false, false
	}
}
