package rootfs

import (
	"bufio"
	"bytes"
	"io"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/berth-sh/berth/internal/errdefs"
)

// maxIDFileBytes caps how much of /etc/passwd and /etc/group is read.
const maxIDFileBytes = 4 << 20

// ReadSmallFile reads a file inside the root; a missing file reads empty.
func (r *Root) ReadSmallFile(p string, limit int64) ([]byte, error) {
	_, rel, err := CleanPath(p)
	if err != nil {
		return nil, err
	}
	fd, err := r.Open(rel, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY)
	if err == unix.ENOENT {
		return nil, nil
	}
	if err != nil {
		return nil, PathErr("open", p, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || !IsReg(st.Mode) {
		return nil, errdefs.Invalid("%s is not a regular file", p)
	}
	return io.ReadAll(io.LimitReader(FDReader(fd), limit))
}

// idEntry is one line of /etc/passwd or /etc/group.
type idEntry struct {
	name    string
	id      int
	gid     int      // passwd: primary group
	home    string   // passwd: home directory
	shell   string   // passwd: login shell
	members []string // group: member names
}

// parseIDFile parses passwd (7 fields) or group (4 fields) lines.
func parseIDFile(data []byte, group bool) []idEntry {
	var out []idEntry
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		f := strings.Split(line, ":")
		if (group && len(f) < 4) || (!group && len(f) < 7) {
			continue
		}
		id, err := parseID(f[2])
		if err != nil {
			continue
		}
		e := idEntry{name: f[0], id: id}
		if group {
			if f[3] != "" {
				e.members = strings.Split(f[3], ",")
			}
		} else if e.gid, err = parseID(f[3]); err != nil {
			continue
		} else {
			e.home, e.shell = f[5], f[6]
		}
		out = append(out, e)
	}
	return out
}

// parseID parses a uid or gid: 0 ≤ id < 2^32-1 (the last is "no id").
func parseID(s string) (int, error) {
	n, err := strconv.ParseUint(s, 10, 32)
	if err != nil || n == 1<<32-1 {
		return 0, errdefs.Invalid("bad id %q", s)
	}
	return int(n), nil
}

func isNumeric(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// Account returns the name, home and shell of uid's /etc/passwd entry
// inside the root; all empty when it has none.
func (r *Root) Account(uid int) (name, home, shell string) {
	data, err := r.ReadSmallFile("/etc/passwd", maxIDFileBytes)
	if err != nil {
		return "", "", ""
	}
	for _, e := range parseIDFile(data, false) {
		if e.id == uid {
			return e.name, e.home, e.shell
		}
	}
	return "", "", ""
}

// ResolveUser turns "uid", "uid:gid", "name" or "name:group" into
// credentials, reading /etc/passwd and /etc/group inside the root. A
// numeric uid without a passwd entry gets gid = uid (never root's group by
// accident) and no supplementary groups. "" means the agent's own user.
func (r *Root) ResolveUser(spec string) (*syscall.Credential, error) {
	if spec == "" {
		return nil, nil
	}
	if len(spec) > 256 || strings.IndexByte(spec, 0) >= 0 {
		return nil, errdefs.Invalid("bad user %q", spec)
	}
	userPart, groupPart, hasGroup := strings.Cut(spec, ":")
	if userPart == "" || (hasGroup && groupPart == "") || strings.Contains(groupPart, ":") {
		return nil, errdefs.Invalid("bad user %q: want uid, uid:gid, name or name:group", spec)
	}
	passwdData, err := r.ReadSmallFile("/etc/passwd", maxIDFileBytes)
	if err != nil {
		return nil, err
	}
	passwd := parseIDFile(passwdData, false)

	cred := &syscall.Credential{}
	var pw *idEntry
	if isNumeric(userPart) {
		uid, err := parseID(userPart)
		if err != nil {
			return nil, err
		}
		cred.Uid, cred.Gid = uint32(uid), uint32(uid)
		for i := range passwd {
			if passwd[i].id == uid {
				pw = &passwd[i]
				break
			}
		}
	} else {
		for i := range passwd {
			if passwd[i].name == userPart {
				pw = &passwd[i]
				break
			}
		}
		if pw == nil {
			return nil, errdefs.NotFound("no such user %q", userPart)
		}
		cred.Uid = uint32(pw.id)
	}
	if pw != nil {
		cred.Gid = uint32(pw.gid)
	}

	needGroups := pw != nil || (hasGroup && !isNumeric(groupPart))
	var groups []idEntry
	if needGroups {
		data, err := r.ReadSmallFile("/etc/group", maxIDFileBytes)
		if err != nil {
			return nil, err
		}
		groups = parseIDFile(data, true)
	}
	if hasGroup {
		if isNumeric(groupPart) {
			gid, err := parseID(groupPart)
			if err != nil {
				return nil, err
			}
			cred.Gid = uint32(gid)
		} else {
			found := false
			for _, g := range groups {
				if g.name == groupPart {
					cred.Gid, found = uint32(g.id), true
					break
				}
			}
			if !found {
				return nil, errdefs.NotFound("no such group %q", groupPart)
			}
		}
	}
	cred.Groups = []uint32{}
	if pw != nil {
		for _, g := range groups {
			for _, m := range g.members {
				if m == pw.name && uint32(g.id) != cred.Gid {
					cred.Groups = append(cred.Groups, uint32(g.id))
					break
				}
			}
		}
	}
	return cred, nil
}

// FDReader reads a file descriptor, retrying EINTR.
type FDReader int

func (r FDReader) Read(p []byte) (int, error) {
	for {
		n, err := unix.Read(int(r), p)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return 0, err
		}
		if n == 0 && len(p) > 0 {
			return 0, io.EOF
		}
		return n, nil
	}
}

// ChownDir gives the directory at p, inside the root and not followed if
// it is a symlink, to uid:gid.
func (r *Root) ChownDir(p string, uid, gid int) error {
	_, rel, err := CleanPath(p)
	if err != nil {
		return err
	}
	fd, err := r.Open(rel, unix.O_PATH|unix.O_NOFOLLOW)
	if err != nil {
		return PathErr("chown", p, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return PathErr("chown", p, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return errdefs.Invalid("%s is not a directory", p)
	}
	return PathErr("chown", p, unix.Fchownat(fd, "", uid, gid, unix.AT_EMPTY_PATH))
}
