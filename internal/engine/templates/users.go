package templates

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/templatefile"
)

// maxIDFile bounds how much of the build sandbox's /etc/passwd or
// /etc/group the daemon reads: the sandbox wrote them.
const maxIDFile = 4 << 20

// addUser is a template file's user step, in build sandbox id: a passwd
// line, a group line (unless the group exists) and a home directory owned
// by the user. A name or uid already in /etc/passwd is refused.
func (m *Builder) addUser(ctx context.Context, id string, u *templatefile.UserStep, actor string) error {
	u = u.WithDefaults()
	f, err := m.files.Files(ctx, id, true, actor)
	if err != nil {
		return err
	}
	defer f.Close()
	read := func(p string) ([]byte, error) {
		var b bytes.Buffer
		if _, err := f.ReadFile(ctx, p, &limitWriter{w: &b, n: maxIDFile}); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
			return nil, fmt.Errorf("reading %s: %w", p, err)
		}
		return b.Bytes(), nil
	}
	passwd, err := read("/etc/passwd")
	if err != nil {
		return err
	}
	if line, ok := passwdHas(passwd, u.Name, u.UID); ok {
		return errdefs.Conflict("user %s (uid %d): /etc/passwd already has %q", u.Name, u.UID, line)
	}
	group, err := read("/etc/group")
	if err != nil {
		return err
	}
	haveGroup := groupHas(group, u.GID)
	write := func(p string, old []byte, line string) error {
		b := bytes.Clone(old)
		if len(b) > 0 && b[len(b)-1] != '\n' {
			b = append(b, '\n')
		}
		b = append(b, line+"\n"...)
		_, err := f.WriteFile(ctx, p, 0o644, bytes.NewReader(b), actor)
		return err
	}
	if err := f.Mkdir(ctx, "/etc", 0o755, true, actor); err != nil {
		return err
	}
	if err := write("/etc/passwd", passwd, fmt.Sprintf("%s:x:%d:%d::%s:%s", u.Name, u.UID, u.GID, u.Home, u.Shell)); err != nil {
		return err
	}
	if !haveGroup {
		if err := write("/etc/group", group, fmt.Sprintf("%s:x:%d:", u.Name, u.GID)); err != nil {
			return err
		}
	}
	if err := f.Mkdir(ctx, path.Dir(u.Home), 0o755, true, actor); err != nil {
		return err
	}
	actx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return m.node.Agent(f.Sandbox()).MkdirOwned(actx, u.Home, fmt.Sprintf("%d:%d", u.UID, u.GID))
}

// limitWriter fails a write past n bytes.
type limitWriter struct {
	w io.Writer
	n int64
}

func (l *limitWriter) Write(p []byte) (int, error) {
	if int64(len(p)) > l.n {
		return 0, errdefs.TooLarge("file exceeds %d bytes", maxIDFile)
	}
	l.n -= int64(len(p))
	return l.w.Write(p)
}

// passwdHas returns the line of passwd (a file the sandbox wrote) naming
// user name or uid, if there is one.
func passwdHas(passwd []byte, name string, uid int) (string, bool) {
	id := strconv.Itoa(uid)
	for _, line := range strings.Split(string(passwd), "\n") {
		fs := strings.Split(line, ":")
		if len(fs) >= 3 && (fs[0] == name || fs[2] == id) {
			return line, true
		}
	}
	return "", false
}

// groupHas reports whether group (a file the sandbox wrote) has gid.
func groupHas(group []byte, gid int) bool {
	id := strconv.Itoa(gid)
	for _, line := range strings.Split(string(group), "\n") {
		if fs := strings.Split(line, ":"); len(fs) >= 3 && fs[2] == id {
			return true
		}
	}
	return false
}
