package main

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
func watchPause(ctx context.Context, dir string, interval time.Duration, set func(bool), log *zap.SugaredLogger) {
	last := readPaused(dir, log)
	set(last)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if p := readPaused(dir, log); p != last {
			last = p
			set(p)
		}
	}
}

func readPaused(dir string, log *zap.SugaredLogger) bool {
	b, err := os.ReadFile(filepath.Join(dir, pauseFile))
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			log.Warnw("cannot read the pause setting; keeping the current state", "dir", dir, zap.Error(err))
		}
		return false
	}
	switch v := strings.ToLower(strings.TrimSpace(string(b))); v {
	case "true", "yes", "1":
		return true
	case "false", "no", "0", "":
		return false
	default:
		log.Warnw("ignoring an unknown pause value; use true or false", "file", filepath.Join(dir, pauseFile), "value", v)
		return false
	}
}
