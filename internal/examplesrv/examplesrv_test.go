package examplesrv

import "testing"

func TestNumber(t *testing.T) {
	for _, c := range []struct {
		in string
		n  int
		ok bool
	}{
		{"0", 0, true},
		{"42:xxxx", 42, true},
		{"7#2", 7, true},
		{"123456789012345678999", 123456789012345678, true}, // stops at 18 digits
		{"drop", 0, false},
		{"", 0, false},
		{":1", 0, false},
	} {
		if n, ok := Number([]byte(c.in)); n != c.n || ok != c.ok {
			t.Errorf("Number(%q) = %d, %v; want %d, %v", c.in, n, ok, c.n, c.ok)
		}
	}
}

func TestEnvAndInt(t *testing.T) {
	t.Setenv("EXAMPLESRV_SET", "12")
	t.Setenv("EXAMPLESRV_EMPTY", "")
	if got := Env("EXAMPLESRV_SET", "d"); got != "12" {
		t.Errorf("Env set = %q, want 12", got)
	}
	if got := Env("EXAMPLESRV_EMPTY", "d"); got != "d" {
		t.Errorf("Env empty = %q, want the default d", got)
	}
	if got := Int("EXAMPLESRV_SET", 3); got != 12 {
		t.Errorf("Int set = %d, want 12", got)
	}
	if got := Int("EXAMPLESRV_EMPTY", 3); got != 3 {
		t.Errorf("Int empty = %d, want the default 3", got)
	}
}
