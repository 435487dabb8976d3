package udconn

import (
	"strings"
	"testing"
)

// TestSDKVersionsAsNumaflowReadsThem runs numaflow-shared's own cases
// (server_info.rs tests, with its two test tables of minimums) and the
// strictness its parsers have: semver for Go, Java and Rust, PEP 440 for
// Python.
func TestSDKVersionsAsNumaflowReadsThem(t *testing.T) {
	stable := map[string]string{"go": "0.10.0-z", "python": "1.2.0rc100", "java": "2.0.0-z", "rust": "0.1.0-z"}
	pre := map[string]string{"go": "0.10.0-rc2", "python": "1.2.0b2", "java": "2.0.0-rc2", "rust": "0.1.0-rc3"}
	const fails, bad = "fails", "unreadable"
	for _, c := range []struct {
		table   map[string]string
		lang    string
		version string
		want    string // "ok", fails or bad
	}{
		// numaflow-shared's cases.
		{stable, "python", "1.3.0", "ok"},
		{stable, "python", "1.1.0", fails},
		{stable, "python", "v1.3.0a1", "ok"},
		{stable, "python", "1.1.0a1", fails},
		{stable, "java", "v2.1.0", "ok"},
		{stable, "java", "2.0.0-rc1", fails},
		{stable, "go", "0.11.0-rc2", "ok"},
		{stable, "go", "0.10.0-0.20240913163521-4910018031a7", fails},
		{stable, "rust", "v0.1.1-0.20240913163521-4910018031a7", "ok"},
		{stable, "rust", "0.0.9", fails},
		{pre, "python", "1.3.0", "ok"},
		{pre, "python", "1.1.0", fails},
		{pre, "python", "v1.3.0a1", "ok"},
		{pre, "python", "1.2.0a1", fails},
		{pre, "java", "v2.1.0", "ok"},
		{pre, "java", "2.0.0-rc1", fails},
		{pre, "go", "0.11.0-rc2", "ok"},
		{pre, "go", "0.10.0-0.20240913163521-4910018031a7", fails},
		{pre, "rust", "v0.1.1-0.20240913163521-4910018031a7", "ok"},
		{pre, "rust", "0.0.9", fails},
		// Strict semver (the semver crate) for every language but Python.
		{stable, "go", "v0.10", bad},
		{stable, "go", "v0.010.0", bad},
		{stable, "go", " v0.11.0", bad},
		{stable, "go", "v0.11.0 ", bad},
		{stable, "go", "v0.11.0-", bad},
		{stable, "go", "v0.11.0-rc.01", bad},
		{stable, "go", "v0.11.0-rc..1", bad},
		{stable, "go", "v0.11.0+", bad},
		{stable, "go", "v0.11.0.1", bad},
		{stable, "go", "latest", bad},
		{stable, "go", "v0.11.0+build.007", "ok"},
		{stable, "go", "vv0.11.0", "ok"}, // every leading 'v' is trimmed
		{stable, "go", "v0.10.0+meta", "ok"},
		{stable, "go", "v0.10.0", "ok"},
		{stable, "java", "2.0.0-SNAPSHOT", fails},
		{stable, "java", "2.0.1-SNAPSHOT", "ok"},
		{pre, "go", "0.10.0-rc3", "ok"},
		{pre, "go", "0.10.0-rc10", fails}, // words compare as text: "rc10" < "rc2"
		{pre, "go", "0.10.0-rc.3", fails}, // "rc" < "rc2"
		{pre, "go", "0.10.0-beta", fails}, // "beta" < "rc2"
		{pre, "go", "0.10.0", "ok"},
		// Numaflow compares text: 0.10.20 starts with 0.10.2.
		{map[string]string{"go": "0.10.2-z"}, "go", "0.10.20-rc1", fails},
		{map[string]string{"go": "0.10.2-z"}, "go", "0.10.20", "ok"},
		{map[string]string{"go": "0.10.2-z"}, "go", "0.10.3-rc1", "ok"},
		// PEP 440 (pep440_rs) for Python.
		{stable, "python", "1.2.0rc101", "ok"},
		{stable, "python", "1.2.0rc100", "ok"},
		{stable, "python", "1.2.0rc99", fails},
		{stable, "python", "1.2.0rc100.dev1", fails},
		{stable, "python", "1.2.0.dev1", fails},
		{stable, "python", "1.2", "ok"},
		{stable, "python", "1.2.0.post1", "ok"},
		{stable, "python", "1.2.0-1", "ok"},
		{stable, "python", "1.2.0+local.1", "ok"},
		{stable, "python", "1!0.1", "ok"},
		{stable, "python", "  1.2.0  ", "ok"},
		{stable, "python", "1.2.0-RC-200", "ok"},
		{stable, "python", "1.2.0preview1", fails},
		{stable, "python", "1.2.0foo", bad},
		{stable, "python", "1.2.0rc1rc2", bad},
		{stable, "python", "", bad},
		{pre, "python", "1.2.0beta2", "ok"},
		{pre, "python", "1.2.0b1.post3", fails},
		{pre, "python", "1.2.0b2.dev9", fails},
		{pre, "python", "1.2.0c1", "ok"},
		// pep440_rs's numbers are 64-bit unsigned; a dev release missing
		// counts as the largest.
		{stable, "python", "1.2.0rc9223372036854775808", "ok"},
		{stable, "python", "1.2.0rc100.dev9223372036854775807", fails},
		{stable, "python", "1.2.0rc100.dev18446744073709551615", "ok"}, // ties with no dev release, as in pep440_rs
		{stable, "python", "1.2.0rc18446744073709551616", bad},
	} {
		ok, err := sdkAtLeast(c.version, c.table[c.lang], c.lang)
		got := "ok"
		switch {
		case err != nil:
			got = bad
		case !ok:
			got = fails
		}
		if got != c.want {
			t.Errorf("%s SDK %q against minimum %q: %s (err %v), want %s", c.lang, c.version, c.table[c.lang], got, err, c.want)
		}
	}
}

// TestNumaflowVersionsAsNumaflowChecksThem runs numaflow-shared's
// check_controller_compatibility cases.
func TestNumaflowVersionsAsNumaflowChecksThem(t *testing.T) {
	for _, c := range []struct {
		have, minimum string
		want          string
	}{
		{"v1.abc.7", "1.1.6-z", "unreadable"},
		{"v1.1.7", "1.1.6-z", "ok"},
		{"v1.1.6", "1.1.7-z", "fails"},
		{"1.1.7-rc1", "1.1.6-z", "ok"},
		{"v1.1.6-rc1", "1.1.6-z", "fails"},
		{"v1.1.6", "1.1.7-rc1", "fails"},
		{"1.1.7", "1.1.6-rc1", "ok"},
		{"1.1.7-rc3", "1.1.7-rc2", "ok"},
		{"v1.1.6-rc1", "1.1.6-rc2", "fails"},
		// A minimum may leave out numbers, as a semver requirement may.
		{"1.7.0", "1.4", "ok"},
		{"1.7.0", "1", "ok"},
		{"1.7.0", "2", "fails"},
		{"1.7.0", "1.8", "fails"},
		{"1.7.0", "", "unreadable"},
		// The rest of the semver crate's requirement grammar, which a
		// minimum_numaflow_version reaches (">=" + it).
		{"1.7.0", "1.x", "ok"}, // >=1.x is >=1
		{"1.7.0", "1.4.*", "ok"},
		{"1.7.0", "1.8.X", "fails"},
		{"1.7.0", "*", "unreadable"}, // >=* is not a requirement
		{"1.7.0", "1.4.0, <2", "ok"},
		{"1.7.0", "1.4,<1.5", "fails"},
		{"1.7.0", "1.4.0 , 2.0", "fails"}, // a bare comparator is a caret one: ^2.0
		{"1.7.0", "1.4.0, 1.5", "ok"},     // ^1.5
		{"1.7.0", "1.4.0, ~1.7", "ok"},
		{"1.7.0", "1.4.0, =1.6", "fails"},
		{"1.7.0", "1.4.0, >1.7.0", "fails"},
		{"1.7.0", "1.4.0, <=1.7.0", "ok"},
		{"1.7.0", "1.4.0 <2", "unreadable"},
		{"1.7.0", " 1.4.0", "ok"},          // ASCII spaces are skipped
		{"1.7.0", "1.4.0\t", "unreadable"}, // no other white space is
		{"1.7.0", "\n1.4.0", "unreadable"},
		{"1.7.0", "1.4+b", "unreadable"}, // build metadata only after a patch number
		{"1.7.0", "1.4.0+b", "ok"},
		{"1.7.0", ">=1.4.0-z", "ok"}, // numaflow-shared trims every leading ">="
		{"1.4.5", "1.4-rc1", "unreadable"},
		{"1.7.0", "1.4-rc1", "ok"}, // 1.7.0 does not start with 1.4: compared as 1.7.0 >= 1.4
		{"18446744073709551616.0.0", "1.0.0", "unreadable"},
		{"1.7.0-rc.1", "1.7.0-rc.1, <2", "ok"},
		{"1.7.0-rc.1", "1.6.0, <2", "fails"}, // no comparator is a pre-release of 1.7.0
	} {
		ok, err := numaflowAtLeast(c.have, c.minimum)
		got := "ok"
		switch {
		case err != nil:
			got = "unreadable"
		case !ok:
			got = "fails"
		}
		if got != c.want {
			t.Errorf("Numaflow %q against minimum %q: %s (err %v), want %s", c.have, c.minimum, got, err, c.want)
		}
	}
}

func TestSemverPreReleaseOrder(t *testing.T) {
	// Semantic Versioning 2.0.0's own example, in order.
	order := []string{"alpha", "alpha.1", "alpha.beta", "beta", "beta.2", "beta.11", "rc.1",
		"rc.99999999999999999999", "rc.100000000000000000000", "rc.x", ""}
	for i := range order {
		for j := range order {
			got := comparePre(order[i], order[j])
			want := 0
			if i < j {
				want = -1
			} else if i > j {
				want = 1
			}
			if got != want {
				t.Errorf("comparePre(%q, %q) = %d, want %d", order[i], order[j], got, want)
			}
		}
	}
}

func TestPEP440Order(t *testing.T) {
	// PEP 440's summary of permitted suffixes, in order.
	order := []string{"1.0.dev456", "1.0a1", "1.0a2.dev456", "1.0a12.dev456", "1.0a12", "1.0b1.dev456", "1.0b2",
		"1.0b2.post345.dev456", "1.0b2.post345", "1.0rc1.dev456", "1.0rc1", "1.0", "1.0+abc.5", "1.0.post456.dev34",
		"1.0.post456", "1.0.15", "1.1.dev1"}
	parsed := make([]pep440Version, len(order))
	for i, s := range order {
		v, err := parsePEP440(s)
		if err != nil {
			t.Fatalf("parse %q: %v", s, err)
		}
		parsed[i] = v
	}
	for i := range order {
		for j := range order {
			got := comparePEP440(parsed[i], parsed[j])
			want := 0
			switch {
			case i < j:
				want = -1
			case i > j:
				want = 1
			}
			// Local labels do not order against a public minimum.
			if strings.Contains(order[i], "+") && order[j] == "1.0" || strings.Contains(order[j], "+") && order[i] == "1.0" {
				want = 0
			}
			if got != want {
				t.Errorf("comparePEP440(%q, %q) = %d, want %d", order[i], order[j], got, want)
			}
		}
	}
}
