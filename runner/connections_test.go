package runner

import (
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func TestConnectionsCountAndShowTheState(t *testing.T) {
	reg := prometheus.NewRegistry()
	conns, err := NewConnections(reg, "mv", 0)
	if err != nil {
		t.Fatal(err)
	}
	sink, src := conns.For(RoleSink), conns.For(RoleSource)
	sink.Failed(errors.New("refused"))
	sink.Up()
	sink.Lost(errors.New("reset"))
	sink.Lost(errors.New("second stream saw the same break"))
	sink.Failed(errors.New("refused"))
	sink.Up()
	src.Up()
	got := map[string]float64{}
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		for _, m := range f.GetMetric() {
			role := ""
			for _, l := range m.GetLabel() {
				if l.GetName() == "role" {
					role = l.GetValue()
				}
			}
			v := m.GetCounter().GetValue() + m.GetGauge().GetValue()
			got[f.GetName()+"/"+role] = v
		}
	}
	want := map[string]float64{
		"monovtx_connected/sink": 1, "monovtx_connected/source": 1,
		"monovtx_connection_failed_total/sink": 2, "monovtx_connection_failed_total/source": 0,
		// Two streams reporting the same break count one loss.
		"monovtx_connection_lost_total/sink": 1, "monovtx_connection_lost_total/source": 0,
		"monovtx_connection_up_total/sink": 2, "monovtx_connection_up_total/source": 1,
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
	if len(got) != len(want) {
		t.Errorf("series %v, want exactly %v", got, want)
	}
	var nilConns *Connections
	nilConns.For(RoleSink).Lost(errors.New("reported to no one")) // must not panic
}

// TestSDKInfoIsNumaflows: the SDK a connection reports is numaflow-core's
// sdk_info series, with its labels, and a restarted container's SDK
// replaces the one before it.
func TestSDKInfoIsNumaflows(t *testing.T) {
	reg := prometheus.NewRegistry()
	conns, err := NewConnections(reg, "mv", 2)
	if err != nil {
		t.Fatal(err)
	}
	sink := conns.For(RoleSink).(SDKReporter)
	conns.For(RoleSource).(SDKReporter).SDK("python", "0.11.0", "sourcer")
	sink.SDK("go", "v0.11.0", "sinker")
	sink.SDK("go", "v0.12.0", "sinker") // the container came back upgraded
	sink.SDK("go", "v0.12.0", "sinker")
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range fams {
		if f.GetName() != "sdk_info" {
			continue
		}
		for _, m := range f.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			got = append(got, strings.Join(labels, ",")+" "+strconv.FormatFloat(m.GetGauge().GetValue(), 'g', -1, 64))
		}
	}
	want := []string{
		"component=mono-vertex,component_name=mv,language=go,type=sinker,version=v0.12.0 1",
		"component=mono-vertex,component_name=mv,language=python,type=sourcer,version=0.11.0 1",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("sdk_info series:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
