// Package pyudf runs Numaflow containers written the way the Python SDK
// (pynumaflow) writes them, from testdata/pycontainer.py, for tests of the
// adapters and of the runner against a gRPC server that is not grpc-go's.
package pyudf

import (
	"bufio"
	_ "embed"
	"encoding/base64"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"

	"github.com/monovertex/monovertex/internal/testutil"
	"github.com/monovertex/monovertex/runner"
)

//go:embed testdata/pycontainer.py
var pycontainer []byte

// checked holds the records whose violations a cleanup checks.
var checked sync.Map

// Option sets how Start runs a container.
type Option func(env map[string]string)

// AckTimeout is how long a Python source waits for the ack of a message
// it served before it serves it again (3 s unless set).
func AckTimeout(d time.Duration) Option {
	return func(env map[string]string) {
		env["PYUDF_ACK_TIMEOUT"] = strconv.FormatFloat(d.Seconds(), 'f', -1, 64)
	}
}

// Python returns a Python 3 interpreter that has grpcio and protobuf, for
// containers written the way the Python SDK (pynumaflow) writes them
// (Start): a gRPC server of grpc C-core, whose HTTP/2 (frame
// sizes, flow control, header encoding) is not grpc-go's. $MV_TEST_PYTHON,
// when set, is the one used; otherwise Debian's /usr/bin/python3 (.ci/run
// installs python3-grpcio and python3-protobuf), then python3 on the PATH.
// Without one the test is skipped, except under CI (CI=true or 1) or
// with $MV_TEST_PYTHON set, where it fails.
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

// Start starts the container of kind ("sink", "fallback", "transformer",
// "map", "batchmap" or "source") that testdata/pycontainer.py holds,
// under py, serving on socket with fd's proto (numaflow-go's generated
// descriptors, written beside the socket for it) and writing its
// server-info file at info, as testutil.Start runs a program: stopped
// when the test ends, its stderr (a Python traceback) logged if the test
// failed. It returns once the container wrote its server-info file, and
// with it the record of what a sink accepted or a source is to serve.
// The test fails at its end if the container was given more concurrency
// than Numaflow gives one (a second sink stream, batch map stream or
// source read while one was open).
func Start(t testing.TB, py, kind, socket, info string, fd protoreflect.FileDescriptor, opts ...Option) *Record {
	t.Helper()
	env := map[string]string{"PYTHONDONTWRITEBYTECODE": "1"} // no __pycache__ beside the sockets
	for _, o := range opts {
		o(env)
	}
	// The script is written beside the socket rather than run from the
	// source tree, which a -trimpath build or a copied test binary
	// cannot find.
	script := filepath.Join(filepath.Dir(socket), "pycontainer.py")
	if err := os.WriteFile(script, pycontainer, 0o644); err != nil {
		t.Fatal(err)
	}
	desc := filepath.Join(filepath.Dir(socket), kind+".desc")
	rec := &Record{path: socket + ".received.jsonl"}
	if kind == "source" {
		rec.path = socket + ".spool.jsonl"
	}
	writeDescriptors(t, desc, fd)
	// Once per record: a restarted container shares its predecessor's.
	if _, again := checked.LoadOrStore(rec.path, true); !again {
		t.Cleanup(func() {
			checked.Delete(rec.path)
			if b, err := os.ReadFile(rec.path + ".violations"); err == nil {
				t.Errorf("the Python %s saw more concurrency than Numaflow gives a container:\n%s", kind, b)
			}
		})
	}
	// A restarted container's old server-info file is not its own.
	if err := os.Remove(info); err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	p := testutil.Start(t, "the Python "+kind, py, env, script, kind, desc, socket, info, rec.path)
	// Up once its server-info file is there (it writes it after it
	// listens; a client reading it waits for its end marker, as udconn
	// does); one that dies on the way fails the test now, with what it
	// printed, not each check after a connect timeout.
	deadline := time.After(20 * time.Second)
	for {
		if _, err := os.Stat(info); err == nil {
			rec.Process = p
			return rec
		}
		select {
		case <-p.Done():
			t.Fatalf("the Python %s exited (%d) before it served; its stderr follows", kind, p.ExitCode())
		case <-deadline:
			t.Fatalf("the Python %s wrote no server-info file within 20 s; its stderr follows", kind)
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

// Record is the file where a Python sink appends each message it accepted,
// one JSON line each (id, keys, value in base64, event_time_ms, headers),
// or where the test appends the messages a Python source serves (Produce).
// A restarted container keeps it.
type Record struct {
	// Process is the container, for a test to kill; Start on the same
	// socket starts it again, over the same record.
	Process *testutil.Process

	path string

	mu     sync.Mutex
	offset int64 // what Messages decoded so far: a poll reads only what was appended since
	msgs   []*runner.Message
}

// Messages returns every message recorded so far; a last line still being
// written is left for the next call.
func (r *Record) Messages(t testing.TB) []*runner.Message {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	f, err := os.Open(r.path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Seek(r.offset, io.SeekStart); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(f)
	for {
		line, err := br.ReadBytes('\n')
		if err != nil {
			// EOF, with a partial line or none.
			return append([]*runner.Message(nil), r.msgs...)
		}
		var rec struct {
			ID          string            `json:"id"`
			Keys        []string          `json:"keys"`
			Value       string            `json:"value"`
			EventTimeMs int64             `json:"event_time_ms"`
			Headers     map[string]string `json:"headers"`
		}
		if err := json.Unmarshal(line, &rec); err != nil {
			t.Fatalf("%s at byte %d: %v in %q...", r.path, r.offset, err, line[:min(len(line), 200)])
		}
		v, err := base64.StdEncoding.DecodeString(rec.Value)
		if err != nil {
			t.Fatalf("%s: value of %s: %v", r.path, rec.ID, err)
		}
		r.offset += int64(len(line))
		r.msgs = append(r.msgs, &runner.Message{ID: rec.ID, Keys: rec.Keys, Value: v, EventTime: time.UnixMilli(rec.EventTimeMs), Headers: rec.Headers})
	}
}

// Produce appends values to a Python source's spool: the source serves
// them as messages len(before)+i, with that number as their offset.
func (r *Record) Produce(t testing.TB, values [][]byte) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	var b []byte
	for _, v := range values {
		b = append(b, `{"value":"`...)
		b = base64.StdEncoding.AppendEncode(b, v)
		b = append(b, "\"}\n"...)
	}
	f, err := os.OpenFile(r.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(b); err != nil {
		t.Fatal(err)
	}
}

// Acked returns how many times a Python source was told to ack each
// message number (Produce's order), as it recorded them.
func (r *Record) Acked(t testing.TB) map[int]int {
	t.Helper()
	acked := map[int]int{}
	for _, l := range r.lines(t, ".acked") {
		n, err := strconv.Atoi(l)
		if err != nil {
			t.Fatalf("%s.acked: %v", r.path, err)
		}
		acked[n]++
	}
	return acked
}

// Release lets a Python sink answer the batches it holds (those with a
// value starting with "hold"), now and after a restart.
func (r *Record) Release(t testing.TB) {
	t.Helper()
	if err := os.WriteFile(r.path+".release", nil, 0o644); err != nil {
		t.Fatal(err)
	}
}

// NeverReadAcks returns the acks a Python source got for offsets it never
// served, one line per ack request; a runner sends none.
func (r *Record) NeverReadAcks(t testing.TB) []string {
	t.Helper()
	return r.lines(t, ".never-read-acks")
}

// lines returns the whole lines of the record's file with suffix, none if
// it is not there yet.
func (r *Record) lines(t testing.TB, suffix string) []string {
	t.Helper()
	b, err := os.ReadFile(r.path + suffix)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, l := range strings.SplitAfter(string(b), "\n") {
		if !strings.HasSuffix(l, "\n") {
			break // still being written
		}
		out = append(out, strings.TrimSuffix(l, "\n"))
	}
	return out
}
