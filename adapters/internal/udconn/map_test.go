package udconn_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/numaproj/numaflow-go/pkg/info"

	"github.com/monovertex/monovertex/adapters/internal/udconn"
	"github.com/monovertex/monovertex/adapters/internal/udconn/udftest"
)

func TestMapEndpointSocketFollowsTheMode(t *testing.T) {
	for mode, sock := range map[udconn.MapMode]string{
		udconn.UnaryMap:  "map.sock",
		udconn.BatchMap:  "batchmap.sock",
		udconn.StreamMap: "mapstream.sock",
	} {
		ep := udconn.MapEndpoint("/d", mode)
		if ep.Socket != filepath.Join("/d", sock) || ep.InfoFile != "/d/mapper-server-info" || ep.Container != info.Mapper {
			t.Errorf("%s: %+v, want socket %s and the shared mapper-server-info", mode, ep, sock)
		}
	}
}

func TestMapModeOf(t *testing.T) {
	cases := map[string]udconn.MapMode{
		"unary-map":  udconn.UnaryMap,
		"batch-map":  udconn.BatchMap,
		"stream-map": udconn.StreamMap,
		"":           udconn.UnaryMap, // no MAP_MODE: numaflow-core assumes unary
		"reduce":     udconn.UnaryMap, // unknown: numaflow-core assumes unary
	}
	for v, want := range cases {
		si := &info.ServerInfo{}
		if v != "" {
			si.Metadata = map[string]string{info.MapModeKey: v}
		}
		if got := udconn.MapModeOf(si); got != want {
			t.Errorf("MAP_MODE %q: %s, want %s", v, got, want)
		}
	}
}

func writeMapInfo(t *testing.T, dir string, mode udconn.MapMode) {
	t.Helper()
	si := udftest.ServerInfo(info.Mapper)
	si.Metadata = map[string]string{info.MapModeKey: string(mode)}
	if err := info.Write(si, info.WithServerInfoFilePath(udconn.MapInfoFile(dir))); err != nil {
		t.Fatal(err)
	}
}

func TestReadMapModeWaitsForTheFile(t *testing.T) {
	dir := udftest.Dir(t)
	go func() {
		time.Sleep(300 * time.Millisecond)
		writeMapInfo(t, dir, udconn.StreamMap)
	}()
	mode, err := udconn.ReadMapMode(context.Background(), udftest.Settings(dir), nil)
	if err != nil || mode != udconn.StreamMap {
		t.Fatalf("ReadMapMode: %q, %v; want stream-map", mode, err)
	}
}

func TestReadMapModeGivesUp(t *testing.T) {
	dir := udftest.Dir(t)
	set := udftest.Settings(dir)
	set.StartupTimeout = 300 * time.Millisecond
	_, err := udconn.ReadMapMode(context.Background(), set, nil)
	if err == nil || !strings.Contains(err.Error(), "MV_UDF_STARTUP_TIMEOUT") {
		t.Fatalf("no server-info file: %v, want an error naming MV_UDF_STARTUP_TIMEOUT", err)
	}
}

func TestReadMapModeRefusesABrokenFile(t *testing.T) {
	dir := udftest.Dir(t)
	if err := os.WriteFile(udconn.MapInfoFile(dir), []byte("{not json"+udconn.End), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := udconn.ReadMapMode(context.Background(), udftest.Settings(dir), nil)
	if !udconn.IsIncompatible(err) {
		t.Fatalf("broken server-info file: %v, want an IncompatibleError", err)
	}
}

func TestReadMapModeStopsWithTheContext(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err := udconn.ReadMapMode(ctx, udftest.Settings(udftest.Dir(t)), nil)
	if err != context.DeadlineExceeded {
		t.Fatalf("ReadMapMode after the context ended: %v", err)
	}
}
