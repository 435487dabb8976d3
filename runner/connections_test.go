package runner

import (
	"errors"
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
