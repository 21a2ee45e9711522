package agentd

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/berth-sh/berth/internal/agent/rootfs"
)

// The agent keeps the sandbox's /etc/hosts naming localhost and the
// sandbox's own hostname, as docker and Kubernetes do, so `localhost`
// resolves in images that ship no /etc/hosts and the hostname never goes
// to DNS (where, in an egress sandbox, it would be refused and logged as
// a denied lookup). It runs inside the sandbox as its PID 1, so nothing
// of the host is reached whatever /etc holds; the file is rewritten when
// the hostname differs from the one last written (at start, and before
// each process starts: a warm-pool claim renames a running sandbox).
//
// The image's own lines are kept; the line berth owns ends with
// hostsMark, and is replaced on every rewrite.
const (
	hostsPath    = "/etc/hosts"
	hostsMark    = "# berth: the sandbox's hostname"
	hostsMaxSize = 1 << 20 // an image's /etc/hosts bigger than this is left alone
)

// syncHosts rewrites /etc/hosts when the hostname changed since the last
// call. Failures are logged, never fatal: a read-only /etc, a hosts file
// that is a mount (Kubernetes' kubelet writes its own) or not a regular
// file are the image's or the platform's choice.
func (s *server) syncHosts() {
	if !s.cfg.ManageHosts {
		return
	}
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return
	}
	name := unix.ByteSliceToString(u.Nodename[:])
	s.hostsMu.Lock()
	defer s.hostsMu.Unlock()
	if name == s.hostsName {
		return
	}
	if err := s.writeHosts(name); err != nil {
		s.log.Warn("cannot write /etc/hosts", "err", err)
	}
	// Not retried at every exec if it failed: once per hostname.
	s.hostsName = name
}

// hostsContent is old (the image's file, possibly empty) with localhost
// lines added where it has none and berth's line for hostname in place
// of any earlier one.
func hostsContent(old []byte, hostname string) []byte {
	var out bytes.Buffer
	has4, has6 := false, false
	for _, line := range strings.SplitAfter(string(old), "\n") {
		if line == "" {
			continue
		}
		if strings.Contains(line, hostsMark) {
			continue
		}
		f := strings.Fields(strings.SplitN(line, "#", 2)[0])
		if len(f) >= 2 {
			for _, n := range f[1:] {
				if n == "localhost" {
					has4 = has4 || f[0] == "127.0.0.1"
					has6 = has6 || f[0] == "::1"
				}
			}
		}
		out.WriteString(line)
		if !strings.HasSuffix(line, "\n") {
			out.WriteByte('\n')
		}
	}
	var head bytes.Buffer
	if !has4 {
		head.WriteString("127.0.0.1\tlocalhost\n")
	}
	if !has6 {
		head.WriteString("::1\tlocalhost ip6-localhost ip6-loopback\n")
	}
	head.Write(out.Bytes())
	// validHostname (hostname.go): the names the kernel takes.
	if hostname != "localhost" && validHostname(hostname) {
		head.WriteString("127.0.1.1\t" + hostname + "\t" + hostsMark + "\n")
	}
	return head.Bytes()
}

// writeHosts replaces /etc/hosts by a new file renamed over it (never
// written through: a symlink or special file there is not followed).
func (s *server) writeHosts(hostname string) error {
	old, err := s.root.ReadSmallFile(hostsPath, hostsMaxSize+1)
	if err != nil {
		return err // not a regular file: left as it is
	}
	if len(old) > hostsMaxSize {
		return nil
	}
	content := hostsContent(old, hostname)
	if bytes.Equal(content, old) {
		return nil
	}
	dfd, err := s.root.Open("etc", unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return rootfs.PathErr("open", "/etc", err)
	}
	defer unix.Close(dfd)
	var st unix.Stat_t
	if err := unix.Fstatat(dfd, "hosts", &st, unix.AT_SYMLINK_NOFOLLOW); err == nil && !rootfs.IsReg(st.Mode) {
		return nil
	}
	b := make([]byte, 6)
	rand.Read(b)
	tmp := ".hosts.berth-" + hex.EncodeToString(b)
	fd, err := unix.Openat(dfd, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o644)
	if err != nil {
		return rootfs.PathErr("create", "/etc/"+tmp, err)
	}
	_, werr := unix.Write(fd, content)
	unix.Fchmod(fd, 0o644)
	unix.Close(fd)
	if werr == nil {
		werr = unix.Renameat(dfd, tmp, dfd, "hosts")
	}
	if werr != nil {
		unix.Unlinkat(dfd, tmp, 0)
		return rootfs.PathErr("write", hostsPath, werr)
	}
	return nil
}
