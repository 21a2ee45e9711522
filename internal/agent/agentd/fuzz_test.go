package agentd

import (
	"archive/tar"
	"bufio"
	"bytes"
	"encoding/binary"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/berth-sh/berth/internal/agent/rootfs"

	"github.com/berth-sh/berth/internal/agent"
	"github.com/berth-sh/berth/internal/agent/wire"

	"golang.org/x/sys/unix"
)

// hostileRoot builds a root full of symlinks that point, or try to point,
// out of it, and an outside directory with a sentinel file.
func hostileRoot(t testing.TB) (root, outside string) {
	base := t.TempDir()
	root, outside = filepath.Join(base, "root"), filepath.Join(base, "outside")
	for _, d := range []string{root + "/etc", root + "/dir/sub", outside} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	writeFile(t, root, "etc/hostname", "inside\n")
	writeFile(t, outside, "sentinel", "precious")
	for link, target := range map[string]string{
		"link":        "/",
		"up":          "../../../..",
		"abs":         outside,
		"abssent":     outside + "/sentinel",
		"loop":        "loop",
		"magic":       "/proc/self/root",
		"fd":          "/proc/self/fd/3",
		"dir/sub/esc": "../../../../../..",
		"dir/rel":     "../link",
	} {
		symlink(t, target, filepath.Join(root, link))
	}
	return root, outside
}

func checkOutside(t *testing.T, outside string) {
	t.Helper()
	ents, err := os.ReadDir(outside)
	if err != nil || len(ents) != 1 || ents[0].Name() != "sentinel" {
		t.Fatalf("outside directory changed: %v %v", ents, err)
	}
	if b, _ := os.ReadFile(filepath.Join(outside, "sentinel")); string(b) != "precious" {
		t.Fatalf("sentinel changed: %q", b)
	}
}

// within reports whether the file fd refers to is root or under it.
func within(t *testing.T, fd int, root string) {
	t.Helper()
	p, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd))
	if err != nil {
		t.Fatal(err)
	}
	if p != root && !strings.HasPrefix(p, root+"/") {
		t.Fatalf("resolved to %s, outside %s", p, root)
	}
}

func FuzzResolvePath(f *testing.F) {
	for _, s := range []string{
		"/", "/etc/hostname", "/../../etc/passwd", "../../etc/passwd", "/link/etc/hostname",
		"/up/etc", "/abs/sentinel", "/abssent", "/loop/x", "/magic/etc", "/fd", "/dir/sub/esc/etc",
		"/dir/rel/etc/hostname", "//a//b/../..//c/", "/link/link/up/abs", "/a\x00b", "/" + strings.Repeat("x/", 3000),
		"/proc/self/root/etc", "/dir/sub/esc/../../../abs/..",
	} {
		f.Add(s)
	}
	root, outside := hostileRoot(f)
	r, err := rootfs.OpenRoot(root)
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { r.Close() })
	f.Fuzz(func(t *testing.T, p string) {
		clean, rel, err := rootfs.CleanPath(p)
		if err != nil {
			return
		}
		if !strings.HasPrefix(clean, "/") || strings.Contains(rel, "\x00") {
			t.Fatalf("rootfs.CleanPath(%q) = %q, %q", p, clean, rel)
		}
		for _, flags := range []uint64{unix.O_PATH, unix.O_PATH | unix.O_NOFOLLOW, unix.O_RDONLY | unix.O_NONBLOCK} {
			fd, err := r.Open(rel, flags)
			if err == nil {
				within(t, fd, root)
				unix.Close(fd)
			}
		}
		if pfd, _, err := r.OpenParent(clean); err == nil {
			within(t, pfd, root)
			unix.Close(pfd)
		}
		r.Stat(p)
		r.List(p, func(agent.FileInfo) error { return nil })
		if r.Mkdir(p, 0o755, true) == nil {
			if fd, err := r.Open(rel, unix.O_PATH); err == nil {
				within(t, fd, root)
				unix.Close(fd)
			}
		}
		checkOutside(t, outside)
	})
}

func FuzzWriteTar(f *testing.F) {
	seeds := [][]tarEnt{
		{dirEnt("./"), dirEnt("a/"), reg("a/f", "x"), symEnt("a/l", "f"), linkEnt("a/h", "a/f")},
		{reg("../evil", "x")},
		{reg("/abs", "x")},
		{symEnt("l", "/"), reg("l/evil", "x")},
		{symEnt("l", "../.."), reg("l/evil", "x")},
		{symEnt("l", "."), reg("l/ok", "x")},
		{linkEnt("h", "../outside/sentinel")},
		{symEnt("s", "../outside/sentinel"), linkEnt("h", "s")},
		{{h: tar.Header{Typeflag: tar.TypeChar, Name: "c"}}},
		{reg("a/b/c/d", "deep"), dirEnt("a/b/"), reg("a", "file over dir")},
	}
	for _, s := range seeds {
		f.Add(tarOf(f, s...))
	}
	f.Add([]byte("not a tar"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		base := t.TempDir()
		dest := filepath.Join(base, "root", "dest")
		outside := filepath.Join(base, "outside")
		os.MkdirAll(dest, 0o755)
		os.MkdirAll(outside, 0o755)
		writeFile(t, outside, "sentinel", "precious")
		dfd, err := unix.Open(dest, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer unix.Close(dfd)
		// Half the inputs keep their archive's owners (preserve_owner).
		extractTar(dfd, bytes.NewReader(data), extractOpts{maxBytes: 1 << 20, maxEntries: 256, preserve: len(data)%2 == 1})
		checkOutside(t, outside)
		err = filepath.WalkDir(base, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			switch p {
			case base, filepath.Join(base, "root"), outside, filepath.Join(outside, "sentinel"):
				return nil
			}
			if p != dest && !strings.HasPrefix(p, dest+"/") {
				t.Fatalf("%s created outside the destination", p)
			}
			if d.Type()&(fs.ModeDevice|fs.ModeNamedPipe|fs.ModeSocket) != 0 {
				t.Fatalf("%s is a %v", p, d.Type())
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	})
}

// frame builds one frame.
func frame(t wire.FrameType, p []byte) []byte {
	b := make([]byte, 5, 5+len(p))
	b[0] = byte(t)
	binary.BigEndian.PutUint32(b[1:], uint32(len(p)))
	return append(b, p...)
}

func FuzzHeader(f *testing.F) {
	join := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	f.Add([]byte(`{"v":1,"op":"ping"}` + "\n"))
	f.Add([]byte(`{"v":1,"op":"stat","path":"/"}` + "\n"))
	f.Add([]byte(`{"v":1,"op":"list","path":"/link"}` + "\n"))
	f.Add(join([]byte(`{"v":1,"op":"write_file","path":"/f"}`+"\n"), frame(wire.FrameData, []byte("hello")), frame(wire.FrameEnd, nil)))
	f.Add(join([]byte(`{"v":1,"op":"write_tar","path":"/"}`+"\n"), frame(wire.FrameData, []byte("garbage")), frame(wire.FrameEnd, nil)))
	f.Add(join([]byte(`{"v":2,"op":"ping"}`+"\n"), frame(wire.FrameStdin, []byte("x"))))
	f.Add(join(frame(wire.FrameResult, []byte(`{"version":"x","pid":1}`))))
	f.Add(join(frame(wire.FrameError, []byte(`{"code":"not_found","message":"nope"}`))))
	f.Add(join(frame(wire.FrameResult, []byte(`{"name":"f","size":3}`)), frame(wire.FrameData, []byte("abc")), frame(wire.FrameEnd, nil)))
	f.Add(join(frame(wire.FrameStdout, []byte("out")), frame(wire.FrameStderr, []byte("err")), frame(wire.FrameExit, []byte(`{"code":3}`))))
	f.Add([]byte{byte(wire.FrameData), 0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{byte(wire.FrameData), 0, 0, 0, 10, 'a'})
	f.Add([]byte(`{"v":1,"op":"proc_list"}` + "\n"))
	f.Add(join([]byte(`{"v":1,"op":"proc_attach","proc":{"id":"1","follow":true}}`+"\n"), frame(wire.FrameStdin, []byte("x")), frame(wire.FrameResize, []byte(`{"rows":1}`))))
	f.Add([]byte(`{"v":1,"op":"proc_signal","proc":{"id":"web","signal":"KILL","stop":true}}` + "\n"))
	f.Add([]byte(`{"v":1,"op":"proc_wait","proc":{"id":"99999999999999999999"}}` + "\n"))
	f.Add(join([]byte(`{"v":1,"op":"proc_stdin","proc":{"id":"1"}}`+"\n"), frame(wire.FrameStdin, []byte("x")), frame(wire.FrameStdinEOF, nil)))
	f.Add([]byte(`{"v":1,"op":"proc_attach","proc":{}}` + "\n"))

	a := startAgent(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		// Decoding alone.
		br := bufio.NewReaderSize(bytes.NewReader(data), wire.MaxHeaderBytes)
		req, reqErr := wire.ReadRequest(br)
		fr := wire.NewFrameReader(br)
		for range 64 {
			if _, _, err := fr.Next(); err != nil {
				break
			}
		}
		io.Copy(io.Discard, &wire.DataReader{FR: wire.NewFrameReader(bytes.NewReader(data))})

		// The agent fed the bytes as a connection (never an exec or a
		// process start: the fuzzer must not run commands).
		if reqErr != nil || (req.Op != wire.OpExec && req.Op != wire.OpProcStart) {
			conn, err := net.Dial("unix", a.socket)
			if err != nil {
				t.Fatal(err)
			}
			conn.SetDeadline(time.Now().Add(5 * time.Second))
			conn.Write(data)
			conn.(*net.UnixConn).CloseWrite()
			io.Copy(io.Discard, io.LimitReader(conn, 64<<20))
			conn.Close()
		}
	})
}
