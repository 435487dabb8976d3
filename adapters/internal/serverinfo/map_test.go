package serverinfo_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/numaproj/numaflow-go/pkg/info"

	"github.com/monovertex/monovertex/adapters/internal/serverinfo"
	"github.com/monovertex/monovertex/adapters/internal/serverinfo/udftest"
)

func TestMapEndpointSocketFollowsTheMode(t *testing.T) {
	for mode, sock := range map[serverinfo.MapMode]string{
		serverinfo.UnaryMap:  "map.sock",
		serverinfo.BatchMap:  "batchmap.sock",
		serverinfo.StreamMap: "mapstream.sock",
	} {
		ep := serverinfo.MapEndpoint("/d", mode)
		if ep.Socket != filepath.Join("/d", sock) || ep.InfoFile != "/d/mapper-server-info" || ep.Container != info.Mapper {
			t.Errorf("%s: %+v, want socket %s and the shared mapper-server-info", mode, ep, sock)
		}
	}
}

func TestMapModeOf(t *testing.T) {
	cases := map[string]serverinfo.MapMode{
		"unary-map":  serverinfo.UnaryMap,
		"batch-map":  serverinfo.BatchMap,
		"stream-map": serverinfo.StreamMap,
		"":           serverinfo.UnaryMap, // no MAP_MODE: numaflow-core assumes unary
		"reduce":     serverinfo.UnaryMap, // unknown: numaflow-core assumes unary
	}
	for v, want := range cases {
		si := &info.ServerInfo{}
		if v != "" {
			si.Metadata = map[string]string{info.MapModeKey: v}
		}
		if got := serverinfo.MapModeOf(si); got != want {
			t.Errorf("MAP_MODE %q: %s, want %s", v, got, want)
		}
	}
}

func writeMapInfo(t *testing.T, dir string, mode serverinfo.MapMode) {
	t.Helper()
	si := udftest.ServerInfo(info.Mapper)
	si.Metadata = map[string]string{info.MapModeKey: string(mode)}
	if err := info.Write(si, info.WithServerInfoFilePath(serverinfo.MapInfoFile(dir))); err != nil {
		t.Fatal(err)
	}
}

func TestReadMapModeWaitsForTheFile(t *testing.T) {
	dir := udftest.Dir(t)
	go func() {
		time.Sleep(300 * time.Millisecond)
		writeMapInfo(t, dir, serverinfo.StreamMap)
	}()
	mode, err := serverinfo.ReadMapMode(context.Background(), udftest.Settings(dir), nil)
	if err != nil || mode != serverinfo.StreamMap {
		t.Fatalf("ReadMapMode: %q, %v; want stream-map", mode, err)
	}
}

func TestReadMapModeGivesUp(t *testing.T) {
	dir := udftest.Dir(t)
	set := udftest.Settings(dir)
	set.StartupTimeout = 300 * time.Millisecond
	_, err := serverinfo.ReadMapMode(context.Background(), set, nil)
	if err == nil || !strings.Contains(err.Error(), "MV_UDF_STARTUP_TIMEOUT") {
		t.Fatalf("no server-info file: %v, want an error naming MV_UDF_STARTUP_TIMEOUT", err)
	}
}

func TestReadMapModeRefusesABrokenFile(t *testing.T) {
	dir := udftest.Dir(t)
	if err := os.WriteFile(serverinfo.MapInfoFile(dir), []byte("{not json"+serverinfo.End), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := serverinfo.ReadMapMode(context.Background(), udftest.Settings(dir), nil)
	if !serverinfo.IsIncompatible(err) {
		t.Fatalf("broken server-info file: %v, want an IncompatibleError", err)
	}
}

func TestReadMapModeStopsWithTheContext(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err := serverinfo.ReadMapMode(ctx, udftest.Settings(udftest.Dir(t)), nil)
	if err != context.DeadlineExceeded {
		t.Fatalf("ReadMapMode after the context ended: %v", err)
	}
}
