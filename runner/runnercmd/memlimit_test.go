package runnercmd

import (
	"os"
	"path/filepath"
	"reflect"
	"runtime/debug"
	"testing"
)

func write(t *testing.T, root, rel, content string) {
	t.Helper()
	p := filepath.Join(root, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestCgroupMemoryLimit(t *testing.T) {
	tests := []struct {
		name      string
		files     map[string]string
		v2, v1    string
		wantLimit int64
		wantFile  string
		wantOK    bool
	}{
		{
			name:      "v2 namespaced: limit at the root",
			files:     map[string]string{"sys/fs/cgroup/cgroup.controllers": "memory", "sys/fs/cgroup/memory.max": "536870912\n"},
			v2:        "/",
			wantLimit: 512 << 20, wantFile: "sys/fs/cgroup/memory.max", wantOK: true,
		},
		{
			name: "v2: smallest of the cgroup and its ancestors",
			files: map[string]string{
				"sys/fs/cgroup/cgroup.controllers":          "memory",
				"sys/fs/cgroup/kubepods/memory.max":         "1073741824",
				"sys/fs/cgroup/kubepods/pod1/memory.max":    "268435456",
				"sys/fs/cgroup/kubepods/pod1/c1/memory.max": "max",
			},
			v2:        "/kubepods/pod1/c1",
			wantLimit: 256 << 20, wantFile: "sys/fs/cgroup/kubepods/pod1/memory.max", wantOK: true,
		},
		{
			name:  "v2 without a limit",
			files: map[string]string{"sys/fs/cgroup/cgroup.controllers": "memory", "sys/fs/cgroup/memory.max": "max"},
			v2:    "/",
		},
		{
			name:      "v1 limit",
			files:     map[string]string{"sys/fs/cgroup/memory/memory.limit_in_bytes": "134217728"},
			v1:        "/",
			wantLimit: 128 << 20, wantFile: "sys/fs/cgroup/memory/memory.limit_in_bytes", wantOK: true,
		},
		{
			name:  "v1 unlimited",
			files: map[string]string{"sys/fs/cgroup/memory/memory.limit_in_bytes": "9223372036854771712"},
			v1:    "/",
		},
		{name: "no cgroup files"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			for rel, c := range tt.files {
				write(t, root, rel, c)
			}
			limit, file, ok := cgroupMemoryLimit(root, tt.v2, tt.v1)
			if ok != tt.wantOK || limit != tt.wantLimit {
				t.Fatalf("got %d, %v; want %d, %v", limit, ok, tt.wantLimit, tt.wantOK)
			}
			if ok && file != filepath.Join(root, tt.wantFile) {
				t.Fatalf("limit from %s, want %s", file, tt.wantFile)
			}
		})
	}
}

func TestReadCgroupPaths(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "cgroup")
	os.WriteFile(f, []byte("12:cpu,cpuacct:/a\n11:memory:/kubepods/pod1\n0::/kubepods/pod1/c1\n"), 0o644)
	v2, v1 := readCgroupPaths(f)
	if v2 != "/kubepods/pod1/c1" || v1 != "/kubepods/pod1" {
		t.Fatalf("got v2 %q v1 %q", v2, v1)
	}
}

// A GOMEMLIMIT the user set is left alone, and the "runner started" fields
// say it holds, with the limit the runtime took from it.
func TestSetMemoryLimitKeepsGOMEMLIMIT(t *testing.T) {
	t.Setenv("GOMEMLIMIT", "400MiB")
	before := debug.SetMemoryLimit(-1)
	fields := setMemoryLimit()
	if after := debug.SetMemoryLimit(-1); after != before {
		t.Fatalf("memory limit changed from %d to %d with GOMEMLIMIT set", before, after)
	}
	want := []any{"go_memory_limit_bytes", before, "go_memory_limit_from", "GOMEMLIMIT=400MiB"}
	if !reflect.DeepEqual(fields, want) {
		t.Fatalf("fields %v, want %v", fields, want)
	}
}
