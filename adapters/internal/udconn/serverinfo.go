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
	"math"
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
	ok, err := sdkAtLeast(si.Version, minimum, lang)
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
	// Go reads a null string as empty; numaflow-core's serde refuses the
	// file (a missing field is its default, a null one is an error).
	var fields map[string]json.RawMessage
	if json.Unmarshal(body, &fields) == nil {
		for _, k := range []string{"protocol", "language", "minimum_numaflow_version", "version"} {
			if v, ok := fields[k]; ok && string(v) == "null" {
				return nil, id, &IncompatibleError{Endpoint: ep, Reason: fmt.Sprintf("its %q is null where Numaflow reads a string: %q", k, clip(body))}
			}
		}
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
// minimum for its language and container type (its version read as
// numaflow-core reads it: PEP 440 for Python, strict semver otherwise, so a
// version Numaflow cannot parse is refused), and this runner at least at
// the container's minimum Numaflow version. As in Numaflow, an SDK with an
// empty version or a language other than go, python, java and rust is not
// checked. Unlike Numaflow, at least one of the two versions must be there
// to be checked: a file with neither is refused, and without an SDK check
// the minimum Numaflow version must show the streaming protocols. Each may
// be missing alone, as real SDKs write them: a Go SDK built without module
// information (go test binaries, some build systems) cannot tell its own
// version; and numaflow-go v0.12's batch map server writes no minimum
// Numaflow version, so its SDK version (or, in a build without module
// information, its batch-map mode) must stand for it. warn receives what
// was skipped.
func Check(ep Endpoint, si *info.ServerInfo, warn func(msg string)) error {
	bad := func(format string, args ...any) error {
		return &IncompatibleError{Endpoint: ep, Reason: fmt.Sprintf(format, args...)}
	}
	// numaflow-core reads exactly "tcp" as TCP and anything else as uds,
	// and only a map container's TCP changes how it connects (pynumaflow's
	// multiprocess map servers of 2024 listened on TCP ports).
	if si.Protocol == info.TCP {
		if ep.Container == info.Mapper {
			return bad("it serves protocol \"tcp\" (a multiprocess map server on TCP ports); this runner connects to map containers over their Unix socket only: use an SDK release whose map server listens on %s", filepath.Base(ep.Socket))
		}
		warn(fmt.Sprintf("server-info says protocol \"tcp\"; as Numaflow does for a %s container, the runner connects over its Unix socket", ContainerType(ep)))
	}
	// The language as numaflow-core reads it: exactly go, python, java or
	// rust. Like an empty version, any other language ("Go", or an SDK
	// newer than this table) only skips the SDK check, as Numaflow skips
	// it.
	lang := Language(si)
	sdkKnown := si.Version != "" && lang != "unknown"
	if sdkKnown {
		ct := ContainerType(ep)
		minimum, known := MinSDKVersions[lang][ct]
		if !known {
			return bad("Numaflow has no %s SDK minimum for a %s container", lang, ct)
		}
		ok, err := sdkAtLeast(si.Version, minimum, lang)
		if err != nil {
			return bad("%s SDK version %q cannot be read as Numaflow reads it (%s): %v", lang, clipString(si.Version), versionScheme(lang), err)
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
		return bad("its minimum_numaflow_version is empty and its SDK %s, so whether it speaks the protocols of Numaflow %s cannot be checked; build the container with a released Numaflow SDK",
			unknownSDK(si), NumaflowCompatVersion)
	}
	ok, err := numaflowAtLeast(NumaflowCompatVersion, si.MinimumNumaflowVersion)
	if err != nil {
		return bad("minimum_numaflow_version %q: %v", clipString(si.MinimumNumaflowVersion), err)
	}
	if !ok {
		return bad("its SDK needs Numaflow %s or newer, and this runner speaks the protocols of Numaflow %s; use an SDK release made for Numaflow %s",
			humanVersion(si.MinimumNumaflowVersion), NumaflowCompatVersion, NumaflowCompatVersion)
	}
	if !sdkKnown {
		// Parsed above, so only the comparison can fail.
		if predatesStreaming(si.MinimumNumaflowVersion) {
			return bad("its SDK %s, and its minimum_numaflow_version %s predates the streaming protocols of Numaflow %s, so it cannot be used; build the container with a released Numaflow SDK",
				unknownSDK(si), clipString(si.MinimumNumaflowVersion), StreamingNumaflowVersion)
		}
		warn(fmt.Sprintf("server-info: the SDK %s, so the SDK version check is skipped (as Numaflow skips it); its minimum_numaflow_version shows the streaming protocols", unknownSDK(si)))
	}
	return nil
}

// unknownSDK says why the SDK of si is not checked: no version, or a
// language Numaflow does not know.
func unknownSDK(si *info.ServerInfo) string {
	switch {
	case si.Version == "" && si.Language == "":
		return "version and language are empty"
	case si.Version == "":
		return "version is empty"
	case si.Language == "":
		return "language is empty"
	}
	return fmt.Sprintf("language %q is not one Numaflow knows (go, python, java, rust)", clipString(string(si.Language)))
}

// versionScheme names how numaflow-shared parses an SDK version.
func versionScheme(lang string) string {
	if lang == "python" {
		return "PEP 440"
	}
	return "strict semantic versioning"
}

// beforeStreaming is the last Numaflow release a container's minimum may
// allow for the SDK check to be skipped safely: any 1.3 (the streaming
// protocols came with 1.4.0).
var beforeStreaming = semVersion{major: 1, minor: 3, patch: math.MaxUint64}

// predatesStreaming reports whether a minimum_numaflow_version (already
// checked against this runner's release) also lets in a Numaflow before
// the streaming protocols, so the SDK may not speak them.
func predatesStreaming(minimum string) bool {
	ok, err := checkConstraint(beforeStreaming, ">="+minimum)
	return err == nil && ok
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
