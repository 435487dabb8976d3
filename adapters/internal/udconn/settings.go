package udconn

import (
	"io/fs"
	"strconv"
	"syscall"
	"time"

	"github.com/monovertex/monovertex/runner"
)

// DefaultMaxMessageSize is the largest gRPC message to or from a container,
// the same 64 MiB the Numaflow SDK servers accept.
const DefaultMaxMessageSize = 64 << 20

// The values of MV_UDF_TRANSPORT.
const (
	TransportWire   = "udwire"
	TransportGRPCGo = "grpc-go"
)

// Settings are the environment variables every Numaflow adapter reads.
// Adapters embed it in their settings struct.
type Settings struct {
	Dir              string        `envconfig:"MV_UDS_DIR" default:"/var/run/numaflow" desc:"directory of the Numaflow sockets and server-info files"`
	MaxMessageSize   int           `envconfig:"MV_UDF_MAX_MESSAGE_SIZE" default:"67108864" desc:"largest gRPC message to or from a Numaflow container, in bytes"`
	ReconnectTimeout time.Duration `envconfig:"MV_UDF_RECONNECT_TIMEOUT" default:"60s" desc:"how long a crashed Numaflow container may stay away before the runner exits non-zero"`
	StartupTimeout   time.Duration `envconfig:"MV_UDF_STARTUP_TIMEOUT" default:"2m" desc:"how long to wait at start for a Numaflow container's server-info file and socket"`
	CallTimeout      time.Duration `envconfig:"MV_UDF_CALL_TIMEOUT" default:"60s" desc:"longest wait for a transformer's or sink's answers to one batch; then the stream is reset and the batch retried"`
	Transport        string        `envconfig:"MV_UDF_TRANSPORT" default:"udwire" desc:"gRPC client of the connections to Numaflow containers: udwire (the runner's own, fewer copies of large payloads) or grpc-go"`
	// Connection takes the reports of the connection's state (set from
	// runner.Env, not from the environment); nil reports nothing.
	Connection runner.Connection `ignored:"true"`
}

func (s *Settings) connection() runner.Connection {
	if s.Connection == nil {
		return runner.NoConnection
	}
	return s.Connection
}

// Validate checks the values that parse but cannot be used.
func (s *Settings) Validate(runner.Role) error {
	switch {
	case s.Dir == "":
		return &runner.ConfigError{Var: "MV_UDS_DIR", Value: s.Dir, Reason: "must name the directory shared with the Numaflow containers"}
	case s.MaxMessageSize < 1<<10 || s.MaxMessageSize > 1<<30:
		return &runner.ConfigError{Var: "MV_UDF_MAX_MESSAGE_SIZE", Value: strconv.Itoa(s.MaxMessageSize), Reason: "must be between 1024 and 1073741824 bytes"}
	case s.ReconnectTimeout <= 0:
		return &runner.ConfigError{Var: "MV_UDF_RECONNECT_TIMEOUT", Value: s.ReconnectTimeout.String(), Reason: "must be a positive duration such as 60s"}
	case s.StartupTimeout <= 0:
		return &runner.ConfigError{Var: "MV_UDF_STARTUP_TIMEOUT", Value: s.StartupTimeout.String(), Reason: "must be a positive duration such as 2m"}
	case s.CallTimeout <= 0:
		return &runner.ConfigError{Var: "MV_UDF_CALL_TIMEOUT", Value: s.CallTimeout.String(), Reason: "must be a positive duration such as 60s"}
	case s.Transport != "" && s.Transport != TransportWire && s.Transport != TransportGRPCGo:
		return &runner.ConfigError{Var: "MV_UDF_TRANSPORT", Value: s.Transport, Reason: "must be udwire or grpc-go"}
	}
	return nil
}

func inode(st fs.FileInfo) uint64 {
	if s, ok := st.Sys().(*syscall.Stat_t); ok {
		return s.Ino
	}
	return 0
}
