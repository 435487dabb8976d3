package udconn_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	sinkpb "github.com/numaproj/numaflow-go/pkg/apis/proto/sink/v1"
	"github.com/numaproj/numaflow-go/pkg/info"
	"github.com/numaproj/numaflow-go/pkg/sinker"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/monovertex/monovertex/adapters/internal/udconn"
	"github.com/monovertex/monovertex/adapters/internal/udconn/udftest"
	"github.com/monovertex/monovertex/runner"
)

func TestCheck(t *testing.T) {
	ep := udconn.SinkEndpoint("/x", false)
	cases := []struct {
		name string
		si   info.ServerInfo
		bad  string // substring of the error; empty means compatible
		warn string // substring of a warning, when compatible
	}{
		{"go sdk of this module", info.ServerInfo{Protocol: "uds", Language: "go", Version: "v0.12.0", MinimumNumaflowVersion: "1.4.0-z"}, "", ""},
		{"go pseudo-version of a later release", info.ServerInfo{Protocol: "uds", Language: "go", Version: "v0.10.0-0.20240913163521-4910018031a7", MinimumNumaflowVersion: "1.4.0-z"}, "", ""},
		{"go release candidate of the minimum", info.ServerInfo{Protocol: "uds", Language: "go", Version: "v0.9.0-rc1", MinimumNumaflowVersion: "1.4.0-z"}, "too old", ""},
		{"go sdk before the streaming protocols", info.ServerInfo{Protocol: "uds", Language: "go", Version: "v0.8.1", MinimumNumaflowVersion: "1.2.0-rc4"}, "go SDK version v0.8.1 is too old for a sinker container: Numaflow needs at least 0.9.0", ""},
		{"python stable", info.ServerInfo{Protocol: "uds", Language: "python", Version: "0.10.0", MinimumNumaflowVersion: "1.5.0-z"}, "", ""},
		{"python pre-release of the minimum", info.ServerInfo{Protocol: "uds", Language: "python", Version: "0.9.0rc2", MinimumNumaflowVersion: "1.4.0-z"}, "too old", ""},
		{"python old", info.ServerInfo{Protocol: "uds", Language: "python", Version: "0.8.0", MinimumNumaflowVersion: "1.2.0"}, "too old", ""},
		{"java", info.ServerInfo{Protocol: "uds", Language: "java", Version: "0.9.1", MinimumNumaflowVersion: "1.4.0-z"}, "", ""},
		{"rust", info.ServerInfo{Protocol: "uds", Language: "rust", Version: "0.2.0", MinimumNumaflowVersion: "1.4.0-z"}, "", ""},
		{"rust before Numaflow's minimum", info.ServerInfo{Protocol: "uds", Language: "rust", Version: "0.1.1", MinimumNumaflowVersion: "1.4.0-z"}, "rust SDK version 0.1.1 is too old for a sinker container: Numaflow needs at least 0.2.0", ""},
		{"a language numaflow-core does not know (it reads them exactly) skips the SDK check", info.ServerInfo{Protocol: "uds", Language: "Go", Version: "v0.12.0", MinimumNumaflowVersion: "1.4.0-z"}, "", `language "Go" is not one Numaflow knows`},
		{"an SDK language newer than Numaflow's table skips the SDK check", info.ServerInfo{Protocol: "uds", Language: "csharp", Version: "0.1.0", MinimumNumaflowVersion: "1.5.0-z"}, "", `language "csharp"`},
		{"an unknown language before the streaming protocols", info.ServerInfo{Protocol: "uds", Language: "csharp", Version: "0.1.0", MinimumNumaflowVersion: "1.3.0"}, "predates the streaming protocols", ""},
		{"a go version numaflow-core cannot parse (strict semver)", info.ServerInfo{Protocol: "uds", Language: "go", Version: "v0.12", MinimumNumaflowVersion: "1.4.0-z"}, "cannot be read as Numaflow reads it (strict semantic versioning)", ""},
		{"a java version with a leading zero", info.ServerInfo{Protocol: "uds", Language: "java", Version: "0.09.1", MinimumNumaflowVersion: "1.4.0-z"}, "leading zero", ""},
		{"a python version numaflow-core cannot parse (PEP 440)", info.ServerInfo{Protocol: "uds", Language: "python", Version: "0.10.0-final", MinimumNumaflowVersion: "1.4.0-z"}, "(PEP 440)", ""},
		{"a python release candidate after numaflow's rc100 marker", info.ServerInfo{Protocol: "uds", Language: "python", Version: "0.9.0rc101", MinimumNumaflowVersion: "1.4.0-z"}, "", ""},
		{"sdk needs a newer numaflow", info.ServerInfo{Protocol: "uds", Language: "go", Version: "v0.20.0", MinimumNumaflowVersion: "1.9.0-z"}, "needs Numaflow 1.9.0 or newer", ""},
		{"tcp for a sink is ignored, as numaflow-core ignores it", info.ServerInfo{Protocol: "tcp", Language: "go", Version: "v0.12.0"}, "", `protocol "tcp"`},
		{"an unknown protocol is uds to numaflow-core", info.ServerInfo{Protocol: "UDS", Language: "go", Version: "v0.12.0", MinimumNumaflowVersion: "1.4.0-z"}, "", ""},
		{"unknown language and no minimum numaflow version", info.ServerInfo{Protocol: "uds", Language: "cobol", Version: "1.0.0"}, `language "cobol" is not one Numaflow knows`, ""},
		{"garbage version", info.ServerInfo{Protocol: "uds", Language: "go", Version: "latest"}, "SDK version", ""},
		{"empty version strings are refused", info.ServerInfo{Protocol: "uds", Language: "go"}, "minimum_numaflow_version is empty and its SDK version is empty", ""},
		{"empty version strings of a python sdk are refused", info.ServerInfo{Protocol: "uds", Language: "python", Metadata: map[string]string{info.MapModeKey: "batch-map"}}, "minimum_numaflow_version is empty", ""},
		{"no minimum numaflow version (numaflow-go batch map server)", info.ServerInfo{Protocol: "uds", Language: "go", Version: "v0.12.0"}, "", ""},
		{"sdk built without module versions (test binary)", info.ServerInfo{Protocol: "uds", Language: "go", MinimumNumaflowVersion: "1.4.0-z"}, "", ""},
		{"no sdk version and a minimum before the streaming protocols", info.ServerInfo{Protocol: "uds", Language: "go", MinimumNumaflowVersion: "1.2.0-rc4"}, "predates the streaming protocols", ""},
		{"no language and a minimum before the streaming protocols", info.ServerInfo{Protocol: "uds", Version: "v0.8.0", MinimumNumaflowVersion: "1.3.0"}, "predates the streaming protocols", ""},
		{"no protocol is uds", info.ServerInfo{Language: "go", Version: "v0.12.0", MinimumNumaflowVersion: "1.4.0-z"}, "", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var warnings []string
			err := udconn.Check(ep, &c.si, func(m string) { warnings = append(warnings, m) })
			if c.bad == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				if c.warn != "" && !slices.ContainsFunc(warnings, func(w string) bool { return strings.Contains(w, c.warn) }) {
					t.Fatalf("warnings %q, want one containing %q", warnings, c.warn)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.bad) {
				t.Fatalf("error %v, want one containing %q", err, c.bad)
			}
			if !udconn.IsIncompatible(err) {
				t.Fatalf("%v is not an IncompatibleError", err)
			}
		})
	}
}

// TestCheckRefusesAMapServerOnTCP: numaflow-core connects to a map
// container whose server-info says "tcp" over TCP (pynumaflow's
// multiprocess servers of 2024); the runner does not, and says so.
func TestCheckRefusesAMapServerOnTCP(t *testing.T) {
	ep := udconn.MapEndpoint("/x", udconn.UnaryMap)
	si := info.ServerInfo{Protocol: "tcp", Language: "python", Version: "0.7.0", MinimumNumaflowVersion: "1.2.0",
		Metadata: map[string]string{"MULTIPROC_ENDPOINTS": "127.0.0.1:5551"}}
	err := udconn.Check(ep, &si, func(string) {})
	if err == nil || !strings.Contains(err.Error(), `protocol "tcp"`) || !strings.Contains(err.Error(), "map.sock") || !udconn.IsIncompatible(err) {
		t.Fatalf("error %v, want an IncompatibleError about protocol tcp naming map.sock", err)
	}
}

// TestSupportsNack follows numaflow-shared's supports_nack: per language a
// minimum release (Go, Java 0.11.0-z; Python 0.11.0rc100, PEP 440; Rust
// 0.4.0-z), and no for an empty version or an unknown language.
func TestSupportsNack(t *testing.T) {
	for _, c := range []struct {
		lang, version string
		want          bool
	}{
		{"go", "v0.12.0", true},
		{"go", "v0.11.0", true},
		{"go", "0.11.0", true},
		{"go", "v0.11.0-rc1", false},
		{"go", "v0.11.1-0.20250101000000-abcdef123456", true},
		{"go", "v0.10.3", false},
		{"go", "", false},
		{"python", "0.11.0", true},
		{"python", "0.11.0.post1", true},
		{"python", "0.11.0post1", true}, // PEP 440's other spellings of a post-release
		{"python", "0.11.0-1", true},
		{"python", "0.11.0_post1", true},
		{"python", "0.11.0.POST1", true},
		{"python", "0.11.0.rev1", true},
		{"python", "0.11.0.1", true}, // a fourth release segment
		{"python", "0.11.0.0", true},
		{"python", "0.11.0.dev1", false},
		{"python", "0.11.0RC1", false},
		{"python", "0.10.9.9", false},
		{"python", "0.11.0rc1", false},
		{"python", "0.11.0rc101", true}, // after numaflow-core's rc100 marker, as pep440_rs orders it
		{"python", "0.11.0rc100.dev1", false},
		{"python", "0.11.0+local", true},
		{"python", "0.11.0final", false}, // not PEP 440: pep440_rs cannot parse it
		{"go", "v0.11", false},           // not strict semver: the semver crate cannot parse it
		{"java", "0.011.0", false},
		{"go", "vv0.11.0", true},
		{"python", "0.10.2", false},
		{"java", "0.11.0", true},
		{"java", "0.10.0", false},
		{"rust", "0.4.0", true},
		{"rust", "0.3.9", false},
		{"Go", "v0.12.0", false}, // numaflow-core reads the language exactly
		{"cobol", "1.0.0", false},
		{"", "v0.12.0", false},
		{"go", "latest", false},
	} {
		si := &info.ServerInfo{Language: info.Language(c.lang), Version: c.version}
		if got := udconn.SupportsNack(si); got != c.want {
			t.Errorf("SupportsNack(%s %q) = %v, want %v", c.lang, c.version, got, c.want)
		}
	}
	if udconn.SupportsNack(nil) {
		t.Errorf("SupportsNack(nil) = true")
	}
}

// TestCheckAnOnSuccessSinkAgainstItsOwnMinimums: Numaflow's minimum SDK
// versions are per container type, and an onSuccess sink ("ons-sinker")
// needs a later SDK than the other sinks.
func TestCheckAnOnSuccessSinkAgainstItsOwnMinimums(t *testing.T) {
	ons := udconn.OnSuccessSinkEndpoint("/x")
	for _, c := range []struct {
		lang, version string
		ok            bool
	}{
		{"go", "v0.10.2", true},
		{"go", "v0.10.1", false},
		{"python", "0.11.1", true},
		{"python", "0.11.0", false},
		{"java", "0.10.2", true},
		{"java", "0.10.0", false},
		{"rust", "0.4.0", true},
		{"rust", "0.3.0", false},
	} {
		si := &info.ServerInfo{Protocol: "uds", Language: info.Language(c.lang), Version: c.version, MinimumNumaflowVersion: "1.4.0-z"}
		err := udconn.Check(ons, si, func(string) {})
		if c.ok != (err == nil) {
			t.Errorf("%s %s as an onSuccess sink: %v, want ok=%v", c.lang, c.version, err, c.ok)
		}
		if err != nil && !strings.Contains(err.Error(), "ons-sinker") {
			t.Errorf("%s %s: %v does not name the container type", c.lang, c.version, err)
		}
		// The same SDK as a plain sink is fine.
		if err := udconn.Check(udconn.SinkEndpoint("/x", false), si, func(string) {}); err != nil {
			t.Errorf("%s %s as a sink: %v", c.lang, c.version, err)
		}
	}
}

// TestCheckRefusesAContainerTypeWithoutAMinimum: a server-info file of a
// container type Numaflow has no SDK minimum for here (a reducer's) is
// refused, not waved through.
func TestCheckRefusesAContainerTypeWithoutAMinimum(t *testing.T) {
	ep := udconn.Endpoint{Name: "reducer", InfoFile: "/x/reducer-server-info", Socket: "/x/reduce.sock"}
	si := &info.ServerInfo{Protocol: "uds", Language: "go", Version: "v0.12.0", MinimumNumaflowVersion: "1.4.0-z"}
	err := udconn.Check(ep, si, func(string) {})
	if err == nil || !udconn.IsIncompatible(err) || !strings.Contains(err.Error(), "no go SDK minimum for a reducer container") {
		t.Fatalf("error %v, want an IncompatibleError naming the reducer container", err)
	}
}

func ready(ctx context.Context, cc grpc.ClientConnInterface) (bool, error) {
	r, err := sinkpb.NewSinkClient(cc).IsReady(ctx, &emptypb.Empty{})
	return r.GetReady(), err
}

func serveSink(t *testing.T, ep udconn.Endpoint) *udftest.Server {
	return udftest.Start(t, ep, func(s *grpc.Server) {
		sinkpb.RegisterSinkServer(s, &sinker.Service{Sinker: sinker.SinkerFunc(func(context.Context, <-chan sinker.Datum) sinker.Responses { return nil })})
	})
}

// connect connects to the container at ep, closing the connection when the
// test ends.
func connect(t *testing.T, ep udconn.Endpoint, set udconn.Settings) *udconn.Conn {
	t.Helper()
	c, err := udconn.Connect(context.Background(), ep, set, nil, ready)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// connectThenKill connects to a sink container in a fresh directory and
// kills the container; it returns the container's endpoint and server, the
// connection, and the connection's generation that the container had.
func connectThenKill(t *testing.T) (udconn.Endpoint, *udftest.Server, *udconn.Conn, uint64) {
	t.Helper()
	dir := udftest.Dir(t)
	ep := udconn.SinkEndpoint(dir, false)
	srv := serveSink(t, ep)
	c := connect(t, ep, udftest.Settings(dir))
	_, gen, _ := c.Get(context.Background())
	srv.Kill()
	return ep, srv, c, gen
}

func TestIncompatibleServerInfoIsAConfigError(t *testing.T) {
	cases := []struct {
		name, content, want string
	}{
		{"too old", `{"protocol":"uds","language":"go","version":"v0.8.0","minimum_numaflow_version":"1.2.0-rc4"}` + udconn.End, "go SDK version v0.8.0 is too old"},
		{"no end marker", `{"protocol":"uds","language":"go","version":"v0.12.0"}`, "no end marker"},
		{"not json", "hello" + udconn.End, "not valid JSON"},
		{"empty versions", `{"protocol":"uds","language":"go","version":"","minimum_numaflow_version":""}` + udconn.End, "minimum_numaflow_version is empty and its SDK version is empty"},
		{"a null version (numaflow-core's serde refuses it)", `{"protocol":"uds","language":"go","version":null,"minimum_numaflow_version":"1.4.0-z"}` + udconn.End, `its "version" is null`},
		{"a null language", `{"protocol":"uds","language":null,"version":"v0.12.0","minimum_numaflow_version":"1.4.0-z"}` + udconn.End, `its "language" is null`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := udftest.Dir(t)
			ep := udconn.SinkEndpoint(dir, false)
			udftest.WriteInfo(t, ep, c.content)
			start := time.Now()
			_, err := udconn.Connect(context.Background(), ep, udftest.Settings(dir), nil, ready)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want one containing %q", err, c.want)
			}
			var ce *runner.ConfigError
			if !errors.As(err, &ce) || ce.Var != "MV_UDS_DIR" {
				t.Fatalf("%v does not unwrap to a ConfigError of MV_UDS_DIR", err)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("error is not one line: %q", err)
			}
			if time.Since(start) > 10*time.Second {
				t.Fatalf("refusing took %v", time.Since(start))
			}
		})
	}
}

func TestConnectWaitsForALateContainer(t *testing.T) {
	dir := udftest.Dir(t)
	ep := udconn.SinkEndpoint(dir, false)
	go func() {
		time.Sleep(600 * time.Millisecond)
		serveSink(t, ep)
	}()
	c := connect(t, ep, udftest.Settings(dir))
	if err := c.Ready(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestConnectGivesUpAfterTheStartupTimeout(t *testing.T) {
	dir := udftest.Dir(t)
	set := udftest.Settings(dir)
	set.StartupTimeout = 500 * time.Millisecond
	_, err := udconn.Connect(context.Background(), udconn.SinkEndpoint(dir, false), set, nil, ready)
	if err == nil || !strings.Contains(err.Error(), "MV_UDF_STARTUP_TIMEOUT") || !strings.Contains(err.Error(), "no server-info file") {
		t.Fatalf("error %v", err)
	}
}

func TestARestartedContainerIsCheckedAgain(t *testing.T) {
	ep, _, c, gen := connectThenKill(t)
	udftest.WriteInfo(t, ep, `{"protocol":"uds","language":"go","version":"v0.7.0"}`+udconn.End)
	c.Fail(gen, errors.New("stream broke"))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, _, err := c.Get(ctx)
	if !runner.IsFatal(err) || !udconn.IsIncompatible(err) {
		t.Fatalf("want a fatal incompatibility error, got %v", err)
	}
}

func TestGetWaitsOutARestart(t *testing.T) {
	_, srv, c, gen := connectThenKill(t)
	c.Fail(gen, errors.New("stream broke"))
	if _, _, err := c.Current(); err == nil {
		t.Fatalf("Current returned a connection while the container is away")
	}
	// A caller that cannot wait gets its own context's error, not a fatal one.
	short, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if _, _, err := c.Get(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Get with a short context: %v", err)
	}
	time.AfterFunc(300*time.Millisecond, srv.Restart)
	_, gen2, err := c.Get(context.Background())
	if err != nil || gen2 == gen {
		t.Fatalf("after restart: gen %d (was %d), %v", gen2, gen, err)
	}
}

func TestSettingsValidate(t *testing.T) {
	good := udftest.Settings("/var/run/numaflow")
	if err := good.Validate(runner.RoleSink); err != nil {
		t.Fatalf("defaults refused: %v", err)
	}
	for _, c := range []struct {
		variable string
		change   func(*udconn.Settings)
	}{
		{"MV_UDS_DIR", func(s *udconn.Settings) { s.Dir = "" }},
		{"MV_UDF_MAX_MESSAGE_SIZE", func(s *udconn.Settings) { s.MaxMessageSize = 10 }},
		{"MV_UDF_RECONNECT_TIMEOUT", func(s *udconn.Settings) { s.ReconnectTimeout = 0 }},
		{"MV_UDF_STARTUP_TIMEOUT", func(s *udconn.Settings) { s.StartupTimeout = -time.Second }},
	} {
		s := good
		c.change(&s)
		var ce *runner.ConfigError
		if err := s.Validate(runner.RoleSink); !errors.As(err, &ce) || ce.Var != c.variable {
			t.Errorf("%s: got %v, want a ConfigError naming it", c.variable, err)
		}
	}
}

// connCounts records a Conn's connection reports.
type connCounts struct {
	mu               sync.Mutex
	up, failed, lost int
	sdk              []string // each SDK report, "language version type"
}

func (c *connCounts) SDK(language, version, container string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sdk = append(c.sdk, language+" "+version+" "+container)
}

func (c *connCounts) sdkReports() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.sdk...)
}

func (c *connCounts) Up()          { c.mu.Lock(); c.up++; c.mu.Unlock() }
func (c *connCounts) Failed(error) { c.mu.Lock(); c.failed++; c.mu.Unlock() }
func (c *connCounts) Lost(error)   { c.mu.Lock(); c.lost++; c.mu.Unlock() }
func (c *connCounts) get() (up, failed, lost int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.up, c.failed, c.lost
}

// A container that is late, then restarted: the connection reports failed
// attempts while it is not there, up when it is back (the first up is the
// engine's to report, as for every runner.Connector), and one loss
// however many streams report the break.
func TestConnReportsItsConnectionState(t *testing.T) {
	dir := udftest.Dir(t)
	ep := udconn.SinkEndpoint(dir, false)
	started := make(chan *udftest.Server, 1)
	time.AfterFunc(400*time.Millisecond, func() { started <- serveSink(t, ep) })
	counts := &connCounts{}
	set := udftest.Settings(dir)
	set.Connection = counts
	c := connect(t, ep, set)
	srv := <-started
	up, failed, lost := counts.get()
	if up != 0 || failed < 1 || lost != 0 {
		t.Fatalf("after a late start: up %d failed %d lost %d; want 0 (the engine reports it), at least 1, 0", up, failed, lost)
	}
	_, gen, _ := c.Get(context.Background())
	srv.Kill()
	c.Fail(gen, errors.New("stream broke"))
	c.Fail(gen, errors.New("another stream broke"))
	upgraded := udftest.ServerInfo(info.Sinker)
	upgraded.Version = "v0.12.1"
	time.AfterFunc(300*time.Millisecond, func() { srv.RestartWith(upgraded) })
	if _, _, err := c.Get(context.Background()); err != nil {
		t.Fatal(err)
	}
	up2, failed2, lost2 := counts.get()
	if up2 != 1 || lost2 != 1 || failed2 <= failed {
		t.Fatalf("after a restart: up %d failed %d (was %d) lost %d; want 1, more, 1", up2, failed2, failed, lost2)
	}
	// Each connection says which SDK it reached (numaflow-core's sdk_info).
	if got, want := counts.sdkReports(), []string{"go v0.12.0 sinker", "go v0.12.1 sinker"}; !slices.Equal(got, want) {
		t.Fatalf("SDK reports %q, want %q", got, want)
	}
	if v := c.ServerInfo().Version; v != "v0.12.1" {
		t.Fatalf("ServerInfo().Version = %q after the restart, want v0.12.1", v)
	}
}

// TestSDKTypeIsNumaflowsContainerType: the type of sdk_info is the
// container type numaflow-core gives each sink (ContainerType's names,
// the server-info files' prefixes).
func TestSDKTypeIsNumaflowsContainerType(t *testing.T) {
	for _, c := range []struct {
		ep   func(dir string) udconn.Endpoint
		want string
	}{
		{func(dir string) udconn.Endpoint { return udconn.SinkEndpoint(dir, true) }, "fb-sinker"},
		{udconn.OnSuccessSinkEndpoint, "ons-sinker"},
		{udconn.SourceEndpoint, "sourcer"},
		{udconn.TransformerEndpoint, "sourcetransformer"},
	} {
		dir := udftest.Dir(t)
		ep := c.ep(dir)
		udftest.Start(t, ep, func(s *grpc.Server) {})
		counts := &connCounts{}
		set := udftest.Settings(dir)
		set.Connection = counts
		conn, err := udconn.Connect(context.Background(), ep, set, nil, func(context.Context, grpc.ClientConnInterface) (bool, error) { return true, nil })
		if err != nil {
			t.Fatal(err)
		}
		conn.Close()
		if got := counts.sdkReports(); len(got) != 1 || got[0] != "go v0.12.0 "+c.want {
			t.Errorf("%s: SDK reports %q, want [go v0.12.0 %s]", ep.Name, got, c.want)
		}
	}
}
