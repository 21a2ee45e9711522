package api

import (
	"io/fs"
	"testing"
)

func TestFileModeViews(t *testing.T) {
	for _, tc := range []struct {
		m     fs.FileMode
		str   string
		perm  uint32
		ftype string
	}{
		{fs.ModeDir | 0o755, "drwxr-xr-x", 493, "dir"},
		{0o644, "-rw-r--r--", 0o644, "file"},
		{fs.ModeSymlink | 0o777, "lrwxrwxrwx", 0o777, "symlink"},
		{fs.ModeSetuid | 0o755, "-rwsr-xr-x", 0o4755, "file"},
		{fs.ModeSetgid | 0o640, "-rw-r-S---", 0o2640, "file"},
		{fs.ModeDir | fs.ModeSticky | 0o777, "drwxrwxrwt", 0o1777, "dir"},
		{fs.ModeDir | fs.ModeSticky | 0o776, "drwxrwxrwT", 0o1776, "dir"},
		{fs.ModeNamedPipe | 0o600, "prw-------", 0o600, "fifo"},
		{fs.ModeSocket | 0o755, "srwxr-xr-x", 0o755, "socket"},
		{fs.ModeDevice | fs.ModeCharDevice | 0o666, "crw-rw-rw-", 0o666, "char"},
		{fs.ModeDevice | 0o660, "brw-rw----", 0o660, "block"},
	} {
		if got := ModeString(tc.m); got != tc.str {
			t.Errorf("ModeString(%v) = %q, want %q", tc.m, got, tc.str)
		}
		if got := PosixPermissions(tc.m); got != tc.perm {
			t.Errorf("PosixPermissions(%v) = %o, want %o", tc.m, got, tc.perm)
		}
		if got := FileType(tc.m); got != tc.ftype {
			t.Errorf("FileType(%v) = %q, want %q", tc.m, got, tc.ftype)
		}
	}
}
