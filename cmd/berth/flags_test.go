package main

import (
	"testing"
	"time"
)

func TestParseSize(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
		err  bool
	}{
		{"0", 0, false},
		{"1048576", 1 << 20, false},
		{"512b", 512, false},
		{"1k", 1 << 10, false},
		{"256m", 256 << 20, false},
		{"256M", 256 << 20, false},
		{"1g", 1 << 30, false},
		{"1G", 1 << 30, false},
		{"512MiB", 512 << 20, false},
		{"2GiB", 2 << 30, false},
		{"64KiB", 64 << 10, false},
		{"1.5g", 3 << 29, false},
		{"1gb", 1 << 30, false},
		{"1t", 1 << 40, false},
		{" 10m ", 10 << 20, false},
		{"", 0, true},
		{"m", 0, true},
		{"-1m", 0, true},
		{"12q", 0, true},
		{"1.2.3m", 0, true},
		{"99999999999g", 0, true},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := parseSize(tc.in)
			if tc.err {
				if err == nil {
					t.Fatalf("parseSize(%q) = %d, want error", tc.in, got)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("parseSize(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
			}
		})
	}
}

func TestFormatSize(t *testing.T) {
	for in, want := range map[int64]string{
		0: "0B", 1023: "1023B", 1 << 10: "1KiB", 256 << 20: "256MiB", 3 << 29: "1.5GiB", 5 << 40: "5TiB",
	} {
		if got := formatSize(in); got != want {
			t.Errorf("formatSize(%d) = %q, want %q", in, got, want)
		}
	}
}

func TestParseDuration(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want time.Duration
		err  bool
	}{
		{"30s", 30 * time.Second, false},
		{"5m", 5 * time.Minute, false},
		{"1h30m", 90 * time.Minute, false},
		{"250ms", 250 * time.Millisecond, false},
		{"30", 30 * time.Second, false},
		{"1.5", 1500 * time.Millisecond, false},
		{"0", 0, false},
		{"", 0, true},
		{"-5s", 0, true},
		{"-5", 0, true},
		{"5 minutes", 0, true},
		{"1e300", 0, true},
		{"NaN", 0, true},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := parseDuration(tc.in)
			if tc.err {
				if err == nil {
					t.Fatalf("parseDuration(%q) = %v, want error", tc.in, got)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("parseDuration(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
			}
		})
	}
}

func TestParseKV(t *testing.T) {
	m, err := parseKV([]string{"team=ml", "url=http://x/?a=b", "empty=", "team=infra"}, "label")
	if err != nil {
		t.Fatal(err)
	}
	if m["team"] != "infra" || m["url"] != "http://x/?a=b" || m["empty"] != "" || len(m) != 3 {
		t.Errorf("parseKV = %v", m)
	}
	for _, bad := range []string{"noequals", "=v"} {
		if _, err := parseKV([]string{bad}, "label"); err == nil {
			t.Errorf("parseKV(%q) succeeded", bad)
		}
	}
	if m, err := parseKV(nil, "label"); m != nil || err != nil {
		t.Errorf("parseKV(nil) = %v, %v", m, err)
	}
}

func TestParseEnv(t *testing.T) {
	local := map[string]string{"HOME": "/home/me"}
	lookup := func(k string) (string, bool) { v, ok := local[k]; return v, ok }
	m, err := parseEnv([]string{"A=1", "B=x=y", "HOME", "C="}, lookup)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"A": "1", "B": "x=y", "HOME": "/home/me", "C": ""}
	if len(m) != len(want) {
		t.Fatalf("parseEnv = %v, want %v", m, want)
	}
	for k, v := range want {
		if m[k] != v {
			t.Errorf("%s = %q, want %q", k, m[k], v)
		}
	}
	for _, bad := range []string{"UNSET", "=1", "A B=1"} {
		if _, err := parseEnv([]string{bad}, lookup); err == nil {
			t.Errorf("parseEnv(%q) succeeded", bad)
		}
	}
}

func TestAge(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for d, want := range map[time.Duration]string{
		5 * time.Second: "5s", 3 * time.Minute: "3m", 5 * time.Hour: "5h", 72 * time.Hour: "3d", -time.Second: "0s",
	} {
		if got := age(now, now.Add(-d)); got != want {
			t.Errorf("age(%v) = %q, want %q", d, got, want)
		}
	}
	if age(now, time.Time{}) != "-" {
		t.Error("zero time")
	}
}
