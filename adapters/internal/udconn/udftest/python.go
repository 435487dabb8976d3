package udftest

import (
	"bufio"
	"encoding/base64"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"

	"github.com/monovertex/monovertex/adapters/internal/udconn"
	"github.com/monovertex/monovertex/internal/testutil"
	"github.com/monovertex/monovertex/runner"
)

// Python returns a Python 3 interpreter that has grpcio and protobuf, for
// containers written the way the Python SDK (pynumaflow) writes them
// (PythonContainer): a gRPC server of grpc C-core, whose HTTP/2 (frame
// sizes, flow control, header encoding) is not grpc-go's. $MV_TEST_PYTHON,
// when set, is the one used; otherwise Debian's /usr/bin/python3 (.ci/run
// installs python3-grpcio and python3-protobuf), then python3 on the PATH.
// Without one the test is skipped, except under CI (CI=true or 1), where
// it fails.
func Python(t testing.TB) string {
	t.Helper()
	candidates := []string{"/usr/bin/python3", "python3"}
	if py := os.Getenv("MV_TEST_PYTHON"); py != "" {
		candidates = []string{py}
	}
	var tried []string
	for _, py := range candidates {
		out, err := exec.Command(py, "-c", "import grpc, google.protobuf").CombinedOutput()
		if err == nil {
			return py
		}
		tried = append(tried, py+": "+strings.TrimSpace(lastLine(string(out)+" "+err.Error())))
	}
	msg := "no Python 3 with grpcio and protobuf (Debian: apt-get install python3-grpcio python3-protobuf; or set MV_TEST_PYTHON): " + strings.Join(tried, "; ")
	if ci, _ := strconv.ParseBool(os.Getenv("CI")); ci || os.Getenv("MV_TEST_PYTHON") != "" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}

// PythonContainer starts the container of kind ("sink" or "transformer")
// that testdata/pycontainer.py holds, under py, serving on ep with fd's
// proto (numaflow-go's generated descriptors, written beside the socket
// for it), until the test ends: then it gets SIGTERM, and SIGKILL after
// 10 s. It returns the file where a sink records what it accepted (see
// ReadRecord). What the container printed is logged if the test fails.
func PythonContainer(t testing.TB, py, kind string, ep udconn.Endpoint, fd protoreflect.FileDescriptor) (record string) {
	t.Helper()
	_, self, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("udftest: cannot tell where pycontainer.py is")
	}
	script := filepath.Join(filepath.Dir(self), "testdata", "pycontainer.py")
	dir := filepath.Dir(ep.Socket)
	desc := filepath.Join(dir, kind+".desc")
	record = ep.Socket + ".received.jsonl"
	writeDescriptors(t, desc, fd)
	cmd := exec.Command(py, script, kind, desc, ep.Socket, ep.InfoFile, record)
	var out testutil.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1") // nothing written into the source tree
	// Gone with the test binary, even when a timeout kills it before
	// the cleanup below can run.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", script, err)
	}
	exited := make(chan struct{})
	var waitErr error
	go func() { waitErr = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
			t.Errorf("the Python %s did not stop within 10 s of SIGTERM", kind)
		}
		if t.Failed() {
			t.Logf("the Python %s printed:\n%s", kind, out.String())
		}
	})
	// Up once its server-info file is there (it writes it after it
	// listens); one that dies on the way fails the test now, with what
	// it printed, not each check after a connect timeout.
	deadline := time.After(20 * time.Second)
	for {
		if _, err := os.Stat(ep.InfoFile); err == nil {
			return record
		}
		select {
		case <-exited:
			t.Fatalf("the Python %s exited before it served (%v):\n%s", kind, waitErr, out.String())
		case <-deadline:
			t.Fatalf("the Python %s wrote no server-info file within 20 s:\n%s", kind, out.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// writeDescriptors writes fd and the files it imports (but Google's
// well-known types, which Python's protobuf has) to path as a
// FileDescriptorSet, imports first.
func writeDescriptors(t testing.TB, path string, fd protoreflect.FileDescriptor) {
	t.Helper()
	set := &descriptorpb.FileDescriptorSet{}
	seen := map[string]bool{}
	var add func(fd protoreflect.FileDescriptor)
	add = func(fd protoreflect.FileDescriptor) {
		if seen[fd.Path()] || strings.HasPrefix(fd.Path(), "google/protobuf/") {
			return
		}
		seen[fd.Path()] = true
		imports := fd.Imports()
		for i := 0; i < imports.Len(); i++ {
			add(imports.Get(i).FileDescriptor)
		}
		set.File = append(set.File, protodesc.ToFileDescriptorProto(fd))
	}
	add(fd)
	b, err := proto.Marshal(set)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// records keeps, per record file, what ReadRecord decoded so far, so a
// poll reads only what was appended since (a record holds megabytes of
// base64 after the large-payload checks).
var records = struct {
	sync.Mutex
	m map[string]*recordState
}{m: map[string]*recordState{}}

type recordState struct {
	offset int64
	msgs   []*runner.Message
}

// ReadRecord reads the messages a Python sink recorded in path, one JSON
// line each (id, keys, value in base64, event_time_ms, headers); a last
// line still being written is left for the next read.
func ReadRecord(t testing.TB, path string) []*runner.Message {
	t.Helper()
	records.Lock()
	defer records.Unlock()
	st := records.m[path]
	if st == nil {
		st = &recordState{}
		records.m[path] = st
	}
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Seek(st.offset, io.SeekStart); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(f)
	for {
		line, err := r.ReadBytes('\n')
		if err != nil {
			// EOF, with a partial line or none.
			return append([]*runner.Message(nil), st.msgs...)
		}
		var rec struct {
			ID          string            `json:"id"`
			Keys        []string          `json:"keys"`
			Value       string            `json:"value"`
			EventTimeMs int64             `json:"event_time_ms"`
			Headers     map[string]string `json:"headers"`
		}
		if err := json.Unmarshal(line, &rec); err != nil {
			t.Fatalf("%s at byte %d: %v in %q...", path, st.offset, err, line[:min(len(line), 200)])
		}
		v, err := base64.StdEncoding.DecodeString(rec.Value)
		if err != nil {
			t.Fatalf("%s: value of %s: %v", path, rec.ID, err)
		}
		st.offset += int64(len(line))
		st.msgs = append(st.msgs, &runner.Message{ID: rec.ID, Keys: rec.Keys, Value: v, EventTime: time.UnixMilli(rec.EventTimeMs), Headers: rec.Headers})
	}
}
