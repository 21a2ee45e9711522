package main

import (
	"strings"
	"testing"
)

func TestParseCpArgs(t *testing.T) {
	for _, tc := range []struct {
		src, dst   string
		wantSrc    cpEndpoint
		wantDst    cpEndpoint
		wantErrSub string
	}{
		{"./f", "sb1:/tmp/f", cpEndpoint{path: "./f"}, cpEndpoint{"sb1", "/tmp/f"}, ""},
		{"sb1:/work", ".", cpEndpoint{"sb1", "/work"}, cpEndpoint{path: "."}, ""},
		{"dev:work/x", "out", cpEndpoint{"dev", "work/x"}, cpEndpoint{path: "out"}, ""},
		{"-", "sb1:/work", cpEndpoint{path: "-"}, cpEndpoint{"sb1", "/work"}, ""},
		{"sb1:/work", "-", cpEndpoint{"sb1", "/work"}, cpEndpoint{path: "-"}, ""},
		// A colon after a slash is part of a local path.
		{"./a:b", "sb1:/x", cpEndpoint{path: "./a:b"}, cpEndpoint{"sb1", "/x"}, ""},
		{"/tmp/a:b", "sb1:/x", cpEndpoint{path: "/tmp/a:b"}, cpEndpoint{"sb1", "/x"}, ""},
		{"a", "b", cpEndpoint{}, cpEndpoint{}, "one of SRC and DST"},
		{"s1:/a", "s2:/b", cpEndpoint{"s1", "/a"}, cpEndpoint{"s2", "/b"}, ""},
		{"child:/work/out", "dev:/work/in/", cpEndpoint{"child", "/work/out"}, cpEndpoint{"dev", "/work/in/"}, ""},
		{"sb1:", "x", cpEndpoint{}, cpEndpoint{}, "missing the path"},
		{":/x", "y", cpEndpoint{}, cpEndpoint{}, "want ID:/path"},
		{"", "sb:/x", cpEndpoint{}, cpEndpoint{}, "empty path"},
	} {
		t.Run(tc.src+" "+tc.dst, func(t *testing.T) {
			s, d, err := parseCpArgs(tc.src, tc.dst)
			if tc.wantErrSub != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErrSub) {
					t.Fatalf("err = %v, want containing %q", err, tc.wantErrSub)
				}
				return
			}
			if err != nil || s != tc.wantSrc || d != tc.wantDst {
				t.Fatalf("got %+v %+v %v, want %+v %+v", s, d, err, tc.wantSrc, tc.wantDst)
			}
		})
	}
}
