package config

import (
	"testing"
	"time"
)

// TestDurationsTakeISO8601: every duration setting takes the ISO 8601 form
// Knative's delivery fields use, as well as Go's.
func TestDurationsTakeISO8601(t *testing.T) {
	for _, c := range []struct {
		in   string
		want time.Duration
	}{
		{"1ms", time.Millisecond},
		{"PT1S", time.Second},
		{"PT0.5S", 500 * time.Millisecond},
		{"PT0,2S", 200 * time.Millisecond},
		{"pt10m", 10 * time.Minute},
		{"PT1H30M", 90 * time.Minute},
		{"P1D", 24 * time.Hour},
		{"P1DT2H", 26 * time.Hour},
		{"P2W", 14 * 24 * time.Hour},
		{"PT0S", 0},
		{"-PT1S", -time.Second},
	} {
		got, err := parseDuration(c.in)
		if err != nil || got != c.want {
			t.Errorf("%q: %v %v, want %v", c.in, got, err, c.want)
		}
	}
	for _, bad := range []string{"P", "PT", "P1Y", "P1M", "PT1S1M", "P1H", "PT1D", "PT1.5M30S", "PTxS", "P1e3D", "PT-1S", "P1DT"} {
		if d, err := parseDuration(bad); err == nil {
			t.Errorf("%q: %v, want an error", bad, d)
		}
	}
	// Through the loader, as a user sets them.
	cfg, err := LoadEnv(map[string]string{"MV_RETRY_INTERVAL": "PT0.25S", "MV_RETRY_CAP": "PT10S", "MV_SHUTDOWN_TIMEOUT": "PT1M"})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Retry.Interval != 250*time.Millisecond || cfg.Retry.Cap != 10*time.Second || cfg.ShutdownTimeout != time.Minute {
		t.Errorf("interval %v cap %v shutdown %v", cfg.Retry.Interval, cfg.Retry.Cap, cfg.ShutdownTimeout)
	}
	if _, err := LoadEnv(map[string]string{"MV_RETRY_INTERVAL": "P1M"}); err == nil {
		t.Error("MV_RETRY_INTERVAL=P1M (a month) loaded")
	}
}
