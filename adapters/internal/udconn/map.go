package udconn

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/numaproj/numaflow-go/pkg/info"
	"go.uber.org/zap"

	"github.com/monovertex/monovertex/runner"
)

// MapMode is how a Numaflow map UDF container serves MapFn: one request at a
// time (unary), a batch ended by an EOT (batch), or several responses per
// request (stream). The SDKs say which in the server-info metadata.
type MapMode = info.MapMode

// The map modes, as the SDKs write them under info.MapModeKey.
const (
	UnaryMap  = info.UnaryMap
	BatchMap  = info.BatchMap
	StreamMap = info.StreamMap
)

// MapInfoFile is the server-info file every map container writes in dir,
// whatever its mode.
func MapInfoFile(dir string) string { return filepath.Join(dir, "mapper-server-info") }

// MapEndpoint is the map UDF container in dir serving mode: the three modes
// share the server-info file and each has its own socket (map.sock,
// batchmap.sock, mapstream.sock), as in numaflow-go and numaflow-core.
func MapEndpoint(dir string, mode MapMode) Endpoint {
	sock := "map.sock"
	switch mode {
	case BatchMap:
		sock = "batchmap.sock"
	case StreamMap:
		sock = "mapstream.sock"
	}
	return Endpoint{Name: "map UDF", Container: info.Mapper, Numaflow: "udf", Reason: runner.ReasonMapRuntime,
		Socket: filepath.Join(dir, sock), InfoFile: MapInfoFile(dir)}
}

// MapModeOf is the mode a server-info says, chosen the way numaflow-core
// does (shared/create_components.rs, numaflow-shared server_info.rs
// get_map_mode): "batch-map" and "stream-map" by name, anything else,
// a missing key included, is unary.
func MapModeOf(si *info.ServerInfo) MapMode {
	switch m := MapMode(si.Metadata[info.MapModeKey]); m {
	case BatchMap, StreamMap:
		return m
	}
	return UnaryMap
}

// ReadMapMode waits, as Connect does (up to Settings.StartupTimeout), for
// the map container's server-info file in set.Dir and returns the mode it
// declares, so the caller can Connect to the socket of that mode. A file
// that cannot be used returns an *IncompatibleError.
func ReadMapMode(ctx context.Context, set Settings, log *zap.SugaredLogger) (MapMode, error) {
	if log == nil {
		log = zap.NewNop().Sugar()
	}
	ep := MapEndpoint(set.Dir, UnaryMap)
	ep.Socket = "" // not known until the mode is
	start := time.Now()
	deadline := start.Add(set.StartupTimeout)
	var (
		incompleteID    fileID
		incompleteSince time.Time
		lastLog         = start
	)
	for {
		si, id, err := readFile(ep)
		if err == nil {
			return MapModeOf(si), nil
		}
		var inc *incompleteError
		switch {
		case IsIncompatible(err):
			return "", err
		case errors.As(err, &inc):
			if incompleteSince.IsZero() || id != incompleteID {
				incompleteID, incompleteSince = id, time.Now()
			} else if time.Since(incompleteSince) >= endMarkerWait {
				return "", &IncompatibleError{Endpoint: ep, Reason: fmt.Sprintf(
					"the file has no end marker %s %v after it was written, so it is not from a Numaflow SDK server this runner supports (content %q)",
					End, endMarkerWait, clip(inc.content))}
			}
		case errors.Is(err, errNotYet):
			incompleteSince = time.Time{}
			err = fmt.Errorf("no server-info file at %s yet", ep.InfoFile)
		}
		if !time.Now().Before(deadline) {
			return "", runner.Fatal(fmt.Errorf("the %s container did not come up within %v (MV_UDF_STARTUP_TIMEOUT): %w", ep.Name, set.StartupTimeout, err))
		}
		if !pause(ctx, log, ep.InfoFile, err, deadline, &lastLog) {
			return "", ctx.Err()
		}
	}
}
