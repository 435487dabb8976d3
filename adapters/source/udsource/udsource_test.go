package udsource_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	sourcepb "github.com/numaproj/numaflow-go/pkg/apis/proto/source/v1"
	"github.com/numaproj/numaflow-go/pkg/info"
	"github.com/numaproj/numaflow-go/pkg/sourcer"
	"google.golang.org/grpc"

	"github.com/monovertex/monovertex/adapters/internal/udconn"
	"github.com/monovertex/monovertex/adapters/internal/udconn/udftest"
	"github.com/monovertex/monovertex/adapters/source/udsource"
	"github.com/monovertex/monovertex/internal/examplesrv"
	"github.com/monovertex/monovertex/runner"
	"github.com/monovertex/monovertex/runner/conformance"
)

// store is a Numaflow SDK source over an in-memory queue, with the
// redelivery rules of a real broker: nacked messages come back at once,
// unacked ones after ackTimeout.
type store struct {
	ackTimeout time.Duration
	pending    int64 // when set, Pending answers it instead of the count
	// partition, when set, gives each id's offset its partition (the
	// SDK's default partition otherwise).
	partition func(id int) int32

	mu       sync.Mutex
	produced int
	queue    []int
	inflight map[int]time.Time
	acked    map[int]int // id -> times acked
	nacks    int
	wake     chan struct{}
}

func newStore(ackTimeout time.Duration) *store {
	return &store{ackTimeout: ackTimeout, inflight: map[int]time.Time{}, acked: map[int]int{}, wake: make(chan struct{})}
}

func (s *store) produce(n int) [][]byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	var values [][]byte
	for i := 0; i < n; i++ {
		id := s.produced
		s.produced++
		s.queue = append(s.queue, id)
		values = append(values, value(id))
	}
	close(s.wake)
	s.wake = make(chan struct{})
	return values
}

func value(id int) []byte { return []byte(fmt.Sprintf("value-%d", id)) }

// take returns up to n readable ids, moving expired in-flight ones back first.
func (s *store) take(n int) ([]int, chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, at := range s.inflight {
		if s.ackTimeout > 0 && time.Since(at) > s.ackTimeout {
			delete(s.inflight, id)
			s.queue = append(s.queue, id)
		}
	}
	k := min(n, len(s.queue))
	ids := append([]int(nil), s.queue[:k]...)
	s.queue = s.queue[k:]
	for _, id := range ids {
		s.inflight[id] = time.Now()
	}
	return ids, s.wake
}

func (s *store) Read(ctx context.Context, req sourcer.ReadRequest, ch chan<- sourcer.Message) {
	deadline := time.NewTimer(req.TimeOut())
	defer deadline.Stop()
	for {
		ids, wake := s.take(int(req.Count()))
		if len(ids) > 0 {
			msg := message
			if s.partition != nil {
				msg = func(id int) sourcer.Message {
					return messageAt(id, sourcer.NewOffset([]byte(strconv.Itoa(id)), s.partition(id)))
				}
			}
			examplesrv.Deliver(ctx, ch, ids, msg)
			return
		}
		select {
		case <-wake:
		case <-deadline.C:
			return
		case <-ctx.Done():
			return
		case <-time.After(100 * time.Millisecond): // ack timeouts expire without a wake-up
		}
	}
}

// message is the message of id, with the id as its offset.
func message(id int) sourcer.Message {
	return messageAt(id, sourcer.NewOffsetWithDefaultPartitionId([]byte(strconv.Itoa(id))))
}

func messageAt(id int, o sourcer.Offset) sourcer.Message {
	return sourcer.NewMessage(value(id), o, time.UnixMilli(int64(1_700_000_000_000+id))).
		WithKeys([]string{"k" + strconv.Itoa(id%3)}).WithHeaders(map[string]string{"n": strconv.Itoa(id)})
}

func offsetID(o sourcer.Offset) int {
	id, err := strconv.Atoi(string(o.Value()))
	if err != nil {
		panic(err)
	}
	return id
}

func (s *store) Ack(_ context.Context, req sourcer.AckRequest) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, o := range req.Offsets() {
		id := offsetID(o)
		delete(s.inflight, id)
		s.acked[id]++
	}
}

func (s *store) Nack(_ context.Context, req sourcer.NackRequest) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, o := range req.Offsets() {
		id := offsetID(o.Offset)
		if _, ok := s.inflight[id]; ok {
			delete(s.inflight, id)
			s.queue = append([]int{id}, s.queue...)
			s.nacks++
		}
	}
	close(s.wake)
	s.wake = make(chan struct{})
}

func (s *store) Pending(context.Context) int64 {
	if s.pending != 0 {
		return s.pending
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return int64(s.produced - len(s.acked))
}

func (s *store) ActivePartitions(context.Context) []int32 { return sourcer.DefaultPartitions() }

func (s *store) TotalPartitions(context.Context) *int32 {
	n := int32(1)
	return &n
}

func serve(t *testing.T, dir string, st *store) *udftest.Server {
	return udftest.Start(t, udconn.SourceEndpoint(dir), func(s *grpc.Server) {
		sourcepb.RegisterSourceServer(s, &sourcer.Service{Source: st})
	})
}

func newSource(t *testing.T, set udconn.Settings) *udsource.Source {
	t.Helper()
	return udftest.Connect(t, "udsource.New", func(ctx context.Context) (*udsource.Source, error) { return udsource.New(ctx, set, nil) })
}

// storeSource serves a store without an ack timeout and connects a source
// to it, closed when the test ends.
func storeSource(t *testing.T) (*store, *udftest.Server, *udsource.Source) {
	t.Helper()
	dir := udftest.Dir(t)
	st := newStore(0)
	srv := serve(t, dir, st)
	src := newSource(t, udftest.Settings(dir))
	t.Cleanup(func() { src.Close(context.Background()) })
	return st, srv, src
}

func TestConformanceWithSDKServer(t *testing.T) {
	for _, tr := range udftest.Transports {
		t.Run(tr, func(t *testing.T) {
			dir := udftest.Dir(t)
			st := newStore(3 * time.Second)
			ep := udconn.SourceEndpoint(dir)
			udftest.StartSDK(t, func() udftest.SDKServer {
				return sourcer.NewServer(st, sourcer.WithSockAddr(ep.Socket), sourcer.WithServerInfoFilePath(ep.InfoFile))
			})
			conformance.RunSource(t, conformance.SourceCase{
				New:      func(t *testing.T) runner.Source { return newSource(t, udftest.SettingsFor(dir, tr)) },
				Produce:  func(t *testing.T, n int) [][]byte { return st.produce(n) },
				Features: conformance.SourceFeatures{Lifecycle: conformance.Lifecycle{CloseTwice: true, ConcurrentClose: true, ContinuesAfterErrors: true, BadInput: true}, Nack: true, RedeliverAfterClose: true, Pending: true, KeepsValues: true, RedeliveryWait: 15 * time.Second},
			})
		})
	}
}

func readAll(t *testing.T, src *udsource.Source, n int) []*runner.Message {
	t.Helper()
	var got []*runner.Message
	deadline := time.Now().Add(15 * time.Second)
	for len(got) < n && time.Now().Before(deadline) {
		msgs, err := src.Read(context.Background(), n-len(got), 200*time.Millisecond)
		if err != nil && runner.IsFatal(err) {
			t.Fatalf("read: %v", err)
		}
		got = append(got, msgs...)
	}
	if len(got) != n {
		t.Fatalf("read %d of %d messages", len(got), n)
	}
	return got
}

func TestMessagesCarryTheSourcesFields(t *testing.T) {
	st, _, src := storeSource(t)
	st.produce(3)
	got := readAll(t, src, 3)
	m := got[1]
	if m.ID != udsource.OffsetID(&udsource.Offset{Value: []byte("1")}) || string(m.Value) != "value-1" ||
		fmt.Sprint(m.Keys) != "[k1]" || m.Headers["n"] != "1" || m.EventTime.UnixMilli() != 1_700_000_000_001 {
		t.Fatalf("message %+v", m)
	}
	if err := src.Ack(context.Background(), got); err != nil {
		t.Fatal(err)
	}
	if p, err := src.Pending(context.Background()); err != nil || p != 0 {
		t.Fatalf("pending %d, %v", p, err)
	}
}

// Each message carries its offset's partition as its source partition,
// which labels monovtx_read_total as numaflow-core does, and ends its ID:
// as a u16 (user_defined.rs: partition_id as u16), so -1 is 65535.
func TestMessagesCarryTheirPartition(t *testing.T) {
	dir := udftest.Dir(t)
	st := newStore(0)
	parts := []int32{0, 7, 7, -1, 65536 + 3}
	st.partition = func(id int) int32 { return parts[id] }
	serve(t, dir, st)
	src := newSource(t, udftest.Settings(dir))
	t.Cleanup(func() { src.Close(context.Background()) })
	st.produce(len(parts))
	got := map[string]string{}
	for _, m := range readAll(t, src, len(parts)) {
		p, ok := src.SourcePartition(m)
		got[m.Headers["n"]] = fmt.Sprintf("%s %d %v", m.ID, p, ok)
	}
	for id, want := range []string{"MA==-0 0 true", "MQ==-7 7 true", "Mg==-7 7 true", "Mw==-65535 65535 true", "NA==-3 3 true"} {
		if g := got[strconv.Itoa(id)]; g != want {
			t.Errorf("id %d: ID, source partition %q, want %q", id, g, want)
		}
	}
}

func TestNegativePendingIsUnknown(t *testing.T) {
	dir := udftest.Dir(t)
	st := newStore(0)
	st.pending = -7
	serve(t, dir, st)
	src := newSource(t, udftest.Settings(dir))
	defer src.Close(context.Background())
	if p, err := src.Pending(context.Background()); err != nil || p != -1 {
		t.Fatalf("pending %d, %v; want -1 and no error", p, err)
	}
}

func TestAnAnswerLeftByACancelledReadIsNotLost(t *testing.T) {
	st, _, src := storeSource(t)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if msgs, err := src.Read(ctx, 10, 5*time.Second); len(msgs) != 0 || err == nil {
		t.Fatalf("read on an empty source with a short context: %d messages, %v", len(msgs), err)
	}
	// The request is still open in the container; what it answers now must
	// reach the next Read.
	st.produce(5)
	got := readAll(t, src, 5)
	seen := map[string]bool{}
	for _, m := range got {
		if seen[m.ID] {
			t.Fatalf("%s read twice", m.ID)
		}
		seen[m.ID] = true
	}
	if err := src.Ack(context.Background(), got); err != nil {
		t.Fatal(err)
	}
}

func TestCloseNacksWhatAnOpenRequestBrings(t *testing.T) {
	st, _, src := storeSource(t) // closed below, and again when the test ends
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	src.Read(ctx, 10, 2*time.Second)
	st.produce(4)
	time.Sleep(100 * time.Millisecond)
	if err := src.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if len(st.inflight) != 0 || len(st.queue) != 4 || st.nacks != 4 {
		t.Fatalf("after close: %d in flight, %d queued, %d nacked; want 0, 4, 4", len(st.inflight), len(st.queue), st.nacks)
	}
}

func TestSurvivesContainerRestart(t *testing.T) {
	st, srv, src := storeSource(t)
	ctx := context.Background()
	st.produce(10)
	first := readAll(t, src, 10)
	srv.Kill()
	go func() {
		time.Sleep(500 * time.Millisecond)
		srv.Restart()
	}()
	// Acks of messages read before the restart go to the restarted container.
	var err error
	for attempt := 0; attempt < 50; attempt++ {
		if err = src.Ack(ctx, first); err == nil {
			break
		}
		if runner.IsFatal(err) {
			t.Fatal(err)
		}
	}
	if err != nil {
		t.Fatalf("ack after restart: %v", err)
	}
	st.produce(10)
	second := readAll(t, src, 10)
	if err := src.Ack(ctx, second); err != nil {
		t.Fatal(err)
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if len(st.acked) != 20 {
		t.Fatalf("%d of 20 messages acked", len(st.acked))
	}
}

func TestContainerThatStaysAwayIsFatal(t *testing.T) {
	dir := udftest.Dir(t)
	srv := serve(t, dir, newStore(0))
	set := udftest.Settings(dir)
	set.ReconnectTimeout = 800 * time.Millisecond
	src := newSource(t, set)
	defer src.Close(context.Background())
	srv.Kill()
	udftest.WantReconnectTimeout(t, func() error {
		_, err := src.Read(context.Background(), 10, 100*time.Millisecond)
		return err
	})
	if p, perr := src.Pending(context.Background()); p != -1 || perr == nil {
		t.Fatalf("pending while gone: %d, %v", p, perr)
	}
}

// panickyStore's Read handler has a bug: it panics.
type panickyStore struct{ *store }

func (panickyStore) Read(context.Context, sourcer.ReadRequest, chan<- sourcer.Message) {
	panic("panicky source: cannot read")
}

func TestReadHandlerPanicIsReportedWithItsStack(t *testing.T) {
	dir := udftest.Dir(t)
	udftest.Start(t, udconn.SourceEndpoint(dir), func(s *grpc.Server) {
		sourcepb.RegisterSourceServer(s, &sourcer.Service{Source: panickyStore{newStore(0)}})
	})
	src := newSource(t, udftest.Settings(dir))
	defer src.Close(context.Background())
	var got udftest.Reports
	src.ReportErrorsTo(&got, runner.RoleSource)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := src.Read(ctx, 10, time.Second); err == nil {
		t.Fatal("a read whose handler panicked succeeded")
	}
	for _, e := range got.Errors() {
		if e.Container == "udsource" && e.Stage == "source" && e.Code == "Internal error" && e.Reason == runner.ReasonSourceRuntime &&
			strings.Contains(e.Message, "panicky source: cannot read") && strings.Contains(e.Details, "panickyStore.Read") {
			return
		}
	}
	t.Fatalf("reported %+v; want the udsource container's Internal error with the panic message and its stack", got.Errors())
}

// TestASourceSDKFromBeforeNackIsNotNacked: Numaflow does not call NackFn
// on a source whose SDK predates it (numaflow-shared supports_nack), and
// neither does the adapter: such a container answers UNIMPLEMENTED, and
// redelivers after its own ack timeout. Nack, and the nack of what an
// open read brings at Close, return nil without a call.
func TestASourceSDKFromBeforeNackIsNotNacked(t *testing.T) {
	for _, c := range []struct {
		lang, version string
		nacks         bool
	}{
		{"go", "v0.10.3", false},
		{"go", "", false}, // a build without module information: unknown, so no
		{"python", "0.10.0", false},
		{"go", "v0.11.0", true},
		{"python", "0.11.0", true},
	} {
		t.Run(c.lang+"@"+c.version, func(t *testing.T) {
			dir := udftest.Dir(t)
			st := newStore(time.Second)
			si := udftest.ServerInfo(info.Sourcer)
			si.Language, si.Version = info.Language(c.lang), c.version
			udftest.StartWithInfo(t, udconn.SourceEndpoint(dir), si, func(s *grpc.Server) {
				sourcepb.RegisterSourceServer(s, &sourcer.Service{Source: st})
			})
			src := newSource(t, udftest.Settings(dir))
			st.produce(3)
			msgs := readAll(t, src, 3)
			if err := src.Nack(context.Background(), msgs, runner.Nack{}); err != nil {
				t.Fatalf("nack: %v", err)
			}
			if c.nacks {
				readAll(t, src, 3) // back at once; in flight again
			}
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			defer cancel()
			src.Read(ctx, 10, 2*time.Second) // left open for Close
			st.produce(2)
			time.Sleep(100 * time.Millisecond)
			if err := src.Close(context.Background()); err != nil {
				t.Fatal(err)
			}
			st.mu.Lock()
			nacks := st.nacks
			st.mu.Unlock()
			want := 0
			if c.nacks {
				want = 5
			}
			if nacks != want {
				t.Fatalf("the container was nacked %d messages, want %d", nacks, want)
			}
			// Not nacked, nothing is lost: the source's ack timeout brings
			// all five back.
			again := readAll(t, newSource(t, udftest.Settings(dir)), 5)
			if len(again) != 5 {
				t.Fatalf("read %d messages again, want 5", len(again))
			}
		})
	}
}

// emptyOffsetStore answers a read with a good message and then one whose
// offset is empty, a source with a bug in its code.
type emptyOffsetStore struct{ *store }

func (s emptyOffsetStore) Read(ctx context.Context, req sourcer.ReadRequest, ch chan<- sourcer.Message) {
	ch <- message(0)
	ch <- sourcer.NewMessage(value(1), sourcer.NewOffset(nil, 0), time.UnixMilli(1_700_000_000_001)).WithKeys([]string{"bad"})
}

// rawAnswerServer answers a read with a good message and then bad, which
// no numaflow-go server sends but a hand-written one might.
type rawAnswerServer struct {
	*sourcer.Service
	bad *sourcepb.ReadResponse
}

func (s rawAnswerServer) ReadFn(stream sourcepb.Source_ReadFnServer) error {
	if _, err := stream.Recv(); err != nil {
		return err
	}
	if err := stream.Send(&sourcepb.ReadResponse{Handshake: &sourcepb.Handshake{Sot: true}}); err != nil {
		return err
	}
	if _, err := stream.Recv(); err != nil {
		return err
	}
	good := &sourcepb.ReadResponse{
		Result: &sourcepb.ReadResponse_Result{Payload: value(0), Offset: &sourcepb.Offset{Offset: []byte("0")}},
		Status: &sourcepb.ReadResponse_Status{},
	}
	for _, r := range []*sourcepb.ReadResponse{good, s.bad} {
		if err := stream.Send(r); err != nil {
			return err
		}
	}
	<-stream.Context().Done()
	return nil
}

// An answer numaflow-core refuses (user_defined.rs: "Invalid offset found
// in response", "Empty message in response") fails the read as it fails
// the vertex there: the error is fatal and names what is wrong, and the
// messages read before it are given up, not handed on, so the source
// redelivers them with the rest after the restart.
func TestABadAnswerFailsTheRead(t *testing.T) {
	for _, tc := range []struct {
		name, want string
		source     sourcepb.SourceServer
	}{
		{"message without an offset", `(keys ["bad"]) without an offset`, &sourcer.Service{Source: emptyOffsetStore{newStore(0)}}},
		{"empty answer", "neither a message nor the end of the read", rawAnswerServer{&sourcer.Service{Source: newStore(0)}, &sourcepb.ReadResponse{Status: &sourcepb.ReadResponse_Status{}}}},
		// numaflow-core looks at the message before the status's code.
		{"failure with a message without an offset", `(keys ["f"]) without an offset`, rawAnswerServer{&sourcer.Service{Source: newStore(0)}, &sourcepb.ReadResponse{
			Result: &sourcepb.ReadResponse_Result{Payload: value(1), Keys: []string{"f"}},
			Status: &sourcepb.ReadResponse_Status{Code: sourcepb.ReadResponse_Status_FAILURE},
		}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := udftest.Dir(t)
			udftest.Start(t, udconn.SourceEndpoint(dir), func(s *grpc.Server) { sourcepb.RegisterSourceServer(s, tc.source) })
			src := newSource(t, udftest.Settings(dir))
			t.Cleanup(func() { src.Close(context.Background()) })
			ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
			defer cancel()
			msgs, err := src.Read(ctx, 10, 5*time.Second)
			if !runner.IsFatal(err) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "nothing of this read is written or acked") {
				t.Fatalf("read error %v, want a fatal one saying %q", err, tc.want)
			}
			if len(msgs) != 0 {
				t.Fatalf("read %d messages with the error, want none", len(msgs))
			}
		})
	}
}
