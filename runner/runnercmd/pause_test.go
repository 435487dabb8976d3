package runnercmd

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
)

// pauseRecorder collects what watchPause sets, in order.
type pauseRecorder struct {
	mu     sync.Mutex
	states []bool
}

func (r *pauseRecorder) set(p bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.states = append(r.states, p)
}

func (r *pauseRecorder) last() (bool, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.states) == 0 {
		return false, 0
	}
	return r.states[len(r.states)-1], len(r.states)
}

// waitState waits (bounded) until the last state set is want.
func (r *pauseRecorder) waitState(t *testing.T, want bool) {
	t.Helper()
	for range 200 {
		if got, n := r.last(); n > 0 && got == want {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	got, _ := r.last()
	t.Fatalf("pause state %v, want %v", got, want)
}

// settle lets the watcher poll several times.
func settle() { time.Sleep(60 * time.Millisecond) }

func TestPauseSwitchKeepsItsStateOnBadInput(t *testing.T) {
	dir := t.TempDir()
	key := filepath.Join(dir, pauseFile)
	// Replace the key in one step, as kubelet swaps a ConfigMap's files:
	// a watcher polling between a truncate and a write would read "".
	write := func(v string) {
		t.Helper()
		tmp := filepath.Join(dir, ".tmp")
		if err := os.WriteFile(tmp, []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, key); err != nil {
			t.Fatal(err)
		}
	}
	write("true")
	rec := &pauseRecorder{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go watchPause(ctx, dir, 5*time.Millisecond, rec.set, zap.NewNop().Sugar())
	rec.waitState(t, true)

	// A typo keeps the runner paused.
	write("ture")
	settle()
	if got, _ := rec.last(); !got {
		t.Fatal("an unknown value resumed reading")
	}
	// A read error keeps it paused too: the key becomes, in one rename, a
	// link into a symlink loop (ELOOP; file modes would not stop root).
	loop, link := filepath.Join(dir, ".loop"), filepath.Join(dir, ".link")
	if err := os.Symlink(".loop", loop); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(".loop", link); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(link, key); err != nil {
		t.Fatal(err)
	}
	if _, err := os.ReadFile(key); err == nil {
		t.Fatal("the looping key is readable")
	}
	settle()
	if got, _ := rec.last(); !got {
		t.Fatal("a read error resumed reading")
	}
	// Removing the key resumes, as documented.
	if err := os.Remove(key); err != nil {
		t.Fatal(err)
	}
	rec.waitState(t, false)

	// And the other way round: a typo while running keeps it running.
	write("flase")
	settle()
	if got, _ := rec.last(); got {
		t.Fatal("an unknown value paused reading")
	}
	write("false")
	settle()
	write("yes")
	rec.waitState(t, true)
}

func TestReadPausedValues(t *testing.T) {
	dir := t.TempDir()
	log := zap.NewNop().Sugar()
	if p, ok := readPaused(dir, log); p || !ok {
		t.Fatalf("missing key: paused %v ok %v, want not paused", p, ok)
	}
	for v, want := range map[string][2]bool{
		"true": {true, true}, " TRUE\n": {true, true}, "1": {true, true}, "yes": {true, true},
		"false": {false, true}, "0": {false, true}, "": {false, true}, "no": {false, true},
		"ture": {false, false}, "paused": {false, false},
	} {
		if err := os.WriteFile(filepath.Join(dir, pauseFile), []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
		if p, ok := readPaused(dir, log); p != want[0] || ok != want[1] {
			t.Errorf("%q: paused %v ok %v, want %v %v", v, p, ok, want[0], want[1])
		}
	}
}
