// Package udconn is the connection to a Numaflow user-defined container,
// what the Numaflow adapters (udsource, udtransformer, udmap, udsink) share: the server-info handshake every Numaflow SDK
// container performs (a JSON file ending in an end marker, written next to
// its Unix socket), the compatibility check against it, one gRPC connection
// per container that survives the container being restarted, and the
// bidirectional streams over it (open with a handshake, receive loop,
// failure bookkeeping).
package udconn

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/numaproj/numaflow-go/pkg/info"

	"github.com/monovertex/monovertex/runner"
)

// End is the marker a Numaflow SDK writes after the JSON of a complete
// server-info file ("U+005C__END__").
var End = info.END

// NumaflowCompatVersion is the Numaflow release whose data-plane protocols
// (handshake, EOT, ack and nack streams of numaflow-go v0.12) this runner
// speaks. A container that asks for a newer Numaflow is refused.
const NumaflowCompatVersion = "1.7.0"

// MinSDKVersions are the oldest SDK releases Numaflow's data plane
// accepts, per language and container type (numaflow-shared
// server_info.rs MINIMUM_SUPPORTED_SDK_VERSIONS): the first with the
// streaming protocols, handshake and EOT, and for an onSuccess sink the
// first that serves one. Container types are numaflow-core's names, the
// server-info files' prefixes (ContainerType).
var MinSDKVersions = map[string]map[string]string{
	"go":     sdkMinimums("0.9.0-z", "0.10.2-z"),
	"python": sdkMinimums("0.9.0rc100", "0.11.1rc100"),
	"java":   sdkMinimums("0.9.0-z", "0.10.2-z"),
	"rust":   sdkMinimums("0.2.0-z", "0.4.0-z"),
}

// sdkMinimums is one language's minimums: most container types need
// base, an onSuccess sink ons.
func sdkMinimums(base, ons string) map[string]string {
	return map[string]string{
		"sourcer": base, "sourcetransformer": base, "sinker": base, "fb-sinker": base, "mapper": base,
		"ons-sinker": ons,
	}
}

// ContainerType is the name numaflow-core gives the container at ep (its
// ContainerType, as in sdk_info and its version checks): the server-info
// file's prefix, so an onSuccess sink is "ons-sinker" where numaflow-go
// has no such type.
func ContainerType(ep Endpoint) string {
	return strings.TrimSuffix(filepath.Base(ep.InfoFile), "-server-info")
}

// Language is the SDK language of si as numaflow-core reads it: "go",
// "python", "java" or "rust" exactly (a serde enum), anything else,
// an empty value too, "unknown".
func Language(si *info.ServerInfo) string {
	switch l := string(si.Language); l {
	case "go", "python", "java", "rust":
		return l
	}
	return "unknown"
}

// NackSDKVersions are the first SDK releases, per language, whose source
// serves NackFn (numaflow-shared server_info.rs NACK_SUPPORT_SDK_VERSIONS).
var NackSDKVersions = map[string]string{
	"go":     "0.11.0-z",
	"python": "0.11.0rc100",
	"java":   "0.11.0-z",
	"rust":   "0.4.0-z",
}

// SupportsNack reports whether a source container with this server-info
// serves NackFn, decided as Numaflow's data plane decides it (server_info.rs
// supports_nack): an SDK at least at NackSDKVersions for its language; an
// empty version or an unknown language counts as no. Numaflow does not nack
// such a source at all (the source redelivers after its own ack timeout),
// and neither does udsource.
func SupportsNack(si *info.ServerInfo) bool {
	if si == nil || si.Version == "" {
		return false
	}
	lang := Language(si)
	minimum, known := NackSDKVersions[lang]
	if !known {
		return false
	}
	ok, err := atLeast(si.Version, minimum, lang == "python")
	return err == nil && ok
}

// Endpoint names one Numaflow container: its socket and its server-info file.
type Endpoint struct {
	// Name is how errors and logs call it ("source", "fallback sink", ...).
	Name string
	// Container is the Numaflow container type, the prefix of its server-info file.
	Container info.ContainerType
	// Socket is the path of the Unix socket the container listens on.
	Socket string
	// InfoFile is the path of its server-info file.
	InfoFile string
	// Numaflow is the container's name in a Numaflow MonoVertex pod
	// (udsource, transformer, udf, udsink, fb-udsink, ons-udsink), which
	// its runtime errors are reported under, as numaflow-core does.
	Numaflow string
	// Reason is the monovtx_critical_error_total reason its runtime errors count under.
	Reason string
}

// SourceEndpoint is the user-defined source container in dir.
func SourceEndpoint(dir string) Endpoint {
	return Endpoint{Name: "source", Container: info.Sourcer, Numaflow: "udsource", Reason: runner.ReasonSourceRuntime,
		Socket: filepath.Join(dir, "source.sock"), InfoFile: filepath.Join(dir, "sourcer-server-info")}
}

// TransformerEndpoint is the source-transformer container in dir.
func TransformerEndpoint(dir string) Endpoint {
	return Endpoint{Name: "transformer", Container: info.Sourcetransformer, Numaflow: "transformer", Reason: runner.ReasonTransformerRuntime,
		Socket: filepath.Join(dir, "sourcetransform.sock"), InfoFile: filepath.Join(dir, "sourcetransformer-server-info")}
}

// OnSuccessSinkEndpoint is the onSuccess sink container in dir (numaflow-go
// serves it when NUMAFLOW_UD_CONTAINER_TYPE=ons-udsink). numaflow-go has no
// container type of its own for it, so its versions are checked as a sink's.
func OnSuccessSinkEndpoint(dir string) Endpoint {
	return Endpoint{Name: "onSuccess sink", Container: info.Sinker, Numaflow: "ons-udsink", Reason: runner.ReasonSinkRuntime,
		Socket: filepath.Join(dir, "ons-sink.sock"), InfoFile: filepath.Join(dir, "ons-sinker-server-info")}
}

// SinkEndpointFor is the sink container that serves role: the sink, the
// fallback sink or the onSuccess sink.
func SinkEndpointFor(dir string, role runner.Role) Endpoint {
	switch role {
	case runner.RoleFallbackSink:
		return SinkEndpoint(dir, true)
	case runner.RoleOnSuccessSink:
		return OnSuccessSinkEndpoint(dir)
	}
	return SinkEndpoint(dir, false)
}

// SinkEndpoint is the user-defined sink container in dir: the primary sink,
// or with fallback set the fallback sink.
func SinkEndpoint(dir string, fallback bool) Endpoint {
	if fallback {
		return Endpoint{Name: "fallback sink", Container: info.Fbsinker, Numaflow: "fb-udsink", Reason: runner.ReasonSinkRuntime,
			Socket: filepath.Join(dir, "fb-sink.sock"), InfoFile: filepath.Join(dir, "fb-sinker-server-info")}
	}
	return Endpoint{Name: "sink", Container: info.Sinker, Numaflow: "udsink", Reason: runner.ReasonSinkRuntime,
		Socket: filepath.Join(dir, "sink.sock"), InfoFile: filepath.Join(dir, "sinker-server-info")}
}

// IncompatibleError says that a container's server-info file cannot be
// used: no end marker, bad JSON, or versions that do not fit. It is a
// configuration problem the user fixes by changing the container image, so
// the runner exits with status 2: it unwraps to a *runner.ConfigError.
type IncompatibleError struct {
	Endpoint Endpoint
	Reason   string
}

// Error names the container, its server-info file and why it cannot be used.
func (e *IncompatibleError) Error() string {
	return fmt.Sprintf("the %s container cannot be used: %s (server-info file %s)", e.Endpoint.Name, e.Reason, e.Endpoint.InfoFile)
}

// Unwrap returns the error as a configuration error of MV_UDS_DIR, so the
// runner's "configuration error: exit 2" rule applies.
func (e *IncompatibleError) Unwrap() error {
	return &runner.ConfigError{Var: "MV_UDS_DIR", Value: filepath.Dir(e.Endpoint.InfoFile), Reason: e.Error()}
}

// IsIncompatible reports whether err is or wraps an IncompatibleError.
func IsIncompatible(err error) bool {
	var ie *IncompatibleError
	return errors.As(err, &ie)
}

// errNotYet means the server-info file is missing or still being written.
var errNotYet = errors.New("server-info file not written yet")

// fileID identifies one version of the server-info file, so a restarted
// container (which rewrites it) is told apart from the one that died.
type fileID struct {
	mod  time.Time
	size int64
	ino  uint64
}

func (a fileID) String() string {
	return fmt.Sprintf("%d bytes, written %s", a.size, a.mod.Format(time.RFC3339Nano))
}

// readFile reads the server-info file once. It returns errNotYet while the
// file is missing or empty, errIncomplete with the content when the end
// marker is missing, and the parsed info otherwise.
func readFile(ep Endpoint) (*info.ServerInfo, fileID, error) {
	var id fileID
	st, err := os.Stat(ep.InfoFile)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, id, errNotYet
	}
	if err != nil {
		return nil, id, fmt.Errorf("stat server-info file: %w", err)
	}
	id = fileID{mod: st.ModTime(), size: st.Size(), ino: inode(st)}
	if st.Size() == 0 {
		return nil, id, errNotYet
	}
	b, err := os.ReadFile(ep.InfoFile)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, id, errNotYet
	}
	if err != nil {
		return nil, id, fmt.Errorf("read server-info file: %w", err)
	}
	if len(b) == 0 {
		return nil, id, errNotYet
	}
	body, ok := bytes.CutSuffix(b, []byte(End))
	if !ok {
		return nil, id, &incompleteError{content: b}
	}
	var si info.ServerInfo
	if err := json.Unmarshal(body, &si); err != nil {
		return nil, id, &IncompatibleError{Endpoint: ep, Reason: fmt.Sprintf("it is not valid JSON (%v): %q", err, clip(body))}
	}
	return &si, id, nil
}

// incompleteError is a server-info file without its end marker (yet).
type incompleteError struct{ content []byte }

func (e *incompleteError) Error() string {
	return fmt.Sprintf("server-info file has no end marker %s: %q", End, clip(e.content))
}

// clipString shortens a value quoted in an error, so a hostile or broken
// server-info file cannot turn the one error line into kilobytes.
func clipString(s string) string { return clip([]byte(s)) }

func clip(b []byte) string {
	if len(b) > 200 {
		return string(b[:200]) + "..."
	}
	return string(b)
}

// StreamingNumaflowVersion is the first Numaflow release whose data plane
// speaks the streaming protocols with handshake and EOT: an SDK that needs
// at least this Numaflow speaks them.
const StreamingNumaflowVersion = "1.4.0"

// Check decides whether a container with this server-info can be used,
// the way Numaflow's data plane does: protocol uds, the SDK at least at the
// minimum for its language, and this runner at least at the container's
// minimum Numaflow version. At least one of the two versions must be there
// to be checked: a file with empty version strings is refused. Each may be
// missing alone, as real SDKs write them: a Go SDK built without module
// information (go test binaries, some build systems) cannot tell its own
// version, so its minimum Numaflow version must then show the streaming
// protocols; and numaflow-go v0.12's batch map server writes no minimum
// Numaflow version, so its SDK version (or, in a build without module
// information, its batch-map mode) must stand for it. warn receives what
// was skipped.
func Check(ep Endpoint, si *info.ServerInfo, warn func(msg string)) error {
	bad := func(format string, args ...any) error {
		return &IncompatibleError{Endpoint: ep, Reason: fmt.Sprintf(format, args...)}
	}
	switch si.Protocol {
	case "", info.UDS:
	default:
		return bad("it serves protocol %q; this runner connects to Numaflow containers over Unix sockets (\"uds\") only", clipString(string(si.Protocol)))
	}
	// The language as numaflow-core reads it: exactly go, python, java or
	// rust; "Go" is as unknown to it as "cobol".
	lang := Language(si)
	sdkKnown := si.Version != "" && si.Language != ""
	if sdkKnown {
		minimums, known := MinSDKVersions[lang]
		if !known {
			return bad("SDK language %q is unknown; supported are go, python, java and rust", clipString(string(si.Language)))
		}
		ct := ContainerType(ep)
		minimum, known := minimums[ct]
		if !known {
			return bad("Numaflow has no %s SDK minimum for a %s container", lang, ct)
		}
		ok, err := atLeast(si.Version, minimum, lang == "python")
		if err != nil {
			return bad("SDK version %q: %v", clipString(si.Version), err)
		}
		if !ok {
			return bad("%s SDK version %s is too old for a %s container: Numaflow needs at least %s; upgrade the SDK in the container image",
				lang, si.Version, ct, humanVersion(minimum))
		}
	}
	if si.MinimumNumaflowVersion == "" {
		switch {
		case sdkKnown:
			warn("server-info has no minimum_numaflow_version (numaflow-go's batch map server writes none); the SDK version check stands for it")
			return nil
		case lang == string(info.Go) && ep.Container == info.Mapper && MapModeOf(si) == BatchMap:
			warn("server-info has empty version strings, as numaflow-go's batch map server built without module information writes it; skipping the version checks")
			return nil
		}
		return bad("its version strings are empty (minimum_numaflow_version, and version or language), so whether it speaks the protocols of Numaflow %s cannot be checked; build the container with a released Numaflow SDK",
			NumaflowCompatVersion)
	}
	ok, err := atLeast(NumaflowCompatVersion, si.MinimumNumaflowVersion, false)
	if err != nil {
		return bad("minimum_numaflow_version %q: %v", clipString(si.MinimumNumaflowVersion), err)
	}
	if !ok {
		return bad("its SDK needs Numaflow %s or newer, and this runner speaks the protocols of Numaflow %s; use an SDK release made for Numaflow %s",
			humanVersion(si.MinimumNumaflowVersion), NumaflowCompatVersion, NumaflowCompatVersion)
	}
	if !sdkKnown {
		// Parsed above, so only the comparison can fail.
		if streaming, _ := atLeast(humanVersion(si.MinimumNumaflowVersion), StreamingNumaflowVersion, false); !streaming {
			return bad("it has an empty SDK version or language, and its minimum_numaflow_version %s predates the streaming protocols of Numaflow %s, so it cannot be used; build the container with a released Numaflow SDK",
				clipString(si.MinimumNumaflowVersion), StreamingNumaflowVersion)
		}
		warn("server-info has no SDK version or language; its minimum_numaflow_version shows the streaming protocols, so the SDK version check is skipped")
	}
	return nil
}

// humanVersion drops the "-z" suffix Numaflow uses to say "this stable
// release and not its pre-releases".
func humanVersion(v string) string {
	v = strings.TrimPrefix(v, "v")
	if s, ok := strings.CutSuffix(v, "-z"); ok {
		return s
	}
	if s, ok := strings.CutSuffix(v, "rc100"); ok {
		return s
	}
	return v
}

// version is a release number with a flag for pre-releases (semver
// "-rc1"/"-0.2024..." pseudo-versions, PEP 440 "a1", "b2", "rc1", ".dev1").
type version struct {
	parts [3]int
	pre   bool
}

func parseVersion(s string, pep440 bool) (version, error) {
	var v version
	s = strings.TrimPrefix(strings.TrimSpace(s), "v")
	if s == "" {
		return v, errors.New("empty version")
	}
	// Build metadata never orders versions.
	if i := strings.IndexByte(s, '+'); i >= 0 {
		s = s[:i]
	}
	rest := s
	for i := 0; i < 3; i++ {
		n, j := 0, 0
		for j < len(rest) && rest[j] >= '0' && rest[j] <= '9' {
			n = n*10 + int(rest[j]-'0')
			j++
			if n > 1<<20 {
				return v, errors.New("a number in it is too large")
			}
		}
		if j == 0 {
			if i == 0 {
				return v, errors.New("it does not start with a number")
			}
			break
		}
		v.parts[i] = n
		rest = rest[j:]
		if i < 2 && strings.HasPrefix(rest, ".") && len(rest) > 1 && rest[1] >= '0' && rest[1] <= '9' {
			rest = rest[1:]
			continue
		}
		break
	}
	if pep440 {
		// Further release segments (0.11.0.1) only sort after the
		// first three, as do post-releases in any of PEP 440's
		// spellings (.post1, post1, -1, _post1, .rev1, r1; any case).
		for len(rest) > 1 && rest[0] == '.' && rest[1] >= '0' && rest[1] <= '9' {
			rest = strings.TrimLeft(rest[1:], "0123456789")
		}
		rest = strings.ToLower(rest)
	}
	switch {
	case rest == "":
	case pep440 && isPostRelease(rest):
	case pep440:
		v.pre = true // a, b, rc, .dev
	case strings.HasPrefix(rest, "-"):
		v.pre = true
	default:
		return v, errors.New("it is not a semantic version")
	}
	return v, nil
}

// isPostRelease reports whether the rest of a PEP 440 version after its
// release segments (lower case) starts a post-release.
func isPostRelease(rest string) bool {
	if len(rest) > 1 && rest[0] == '-' && rest[1] >= '0' && rest[1] <= '9' {
		return true // 1.0-1: an implicit post-release
	}
	rest = strings.TrimLeft(rest, ".-_")
	if strings.HasPrefix(rest, "post") || strings.HasPrefix(rest, "rev") {
		return true
	}
	// "r1", but not "rc1".
	return rest == "r" || len(rest) > 1 && rest[0] == 'r' && rest[1] >= '0' && rest[1] <= '9'
}

// atLeast reports whether have >= want, where want is a minimum in
// Numaflow's notation: "X.Y.Z-z" or "X.Y.Z" means the stable release X.Y.Z
// (its pre-releases are older), and a pre-release of a later release counts
// as newer, as Numaflow's check does.
func atLeast(have, want string, pep440 bool) (bool, error) {
	h, err := parseVersion(have, pep440)
	if err != nil {
		return false, err
	}
	w, err := parseVersion(humanVersion(want), pep440)
	if err != nil {
		return false, err
	}
	for i := range h.parts {
		if h.parts[i] != w.parts[i] {
			return h.parts[i] > w.parts[i], nil
		}
	}
	// Same release number: a stable release satisfies any minimum of it; a
	// pre-release satisfies only a pre-release minimum.
	return !h.pre || w.pre, nil
}
