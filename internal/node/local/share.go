package local

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/berth-sh/berth/internal/overlay"
)

// The files the daemon bind-mounts into sandboxes (the agent binary, the
// resolv.conf of egress sandboxes) live on a tmpfs of the daemon's own,
// <data-dir>/share. A bind mount shows its source's path inside its
// filesystem in the sandbox's /proc/self/mountinfo; from this tmpfs that
// is "/berth" or "/resolv/<id>", where the files' own places would name
// host paths (the data dir, the directory berth was installed in). The
// agent binary is a copy made at daemon start, so sandboxes run the agent
// of the daemon that serves them, even if the file is replaced meanwhile.
const (
	shareDir       = "share"
	shareAgentName = "berth"
	shareResolvDir = "resolv"
)

// openShare mounts (or reuses) the share tmpfs under dataDir and copies
// the agent binary into it. It returns the path of the copy.
func openShare(dataDir, agentPath string) (string, error) {
	dir := filepath.Join(dataDir, shareDir)
	if err := os.MkdirAll(dir, 0o711); err != nil {
		return "", err
	}
	src, err := os.Open(agentPath)
	if err != nil {
		return "", fmt.Errorf("agent binary: %w", err)
	}
	defer src.Close()
	st, err := src.Stat()
	if err != nil {
		return "", err
	}
	mounted, err := overlay.Mounted(dir)
	if err != nil {
		return "", err
	}
	// Room for two copies of the binary (a restarted daemon writes its
	// own beside the one running sandboxes still hold) and the small files
	// of many sandboxes; tmpfs takes memory only for what is written. A
	// share left by an earlier daemon is resized to this one's binary.
	size := fmt.Sprintf("size=%d,nr_inodes=1048576", 2*st.Size()+(64<<20))
	if !mounted {
		if err := unix.Mount("berth-share", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, size+",mode=0711"); err != nil {
			return "", fmt.Errorf("mounting %s: %w", dir, err)
		}
	} else if err := unix.Mount("", dir, "", unix.MS_REMOUNT|unix.MS_NOSUID|unix.MS_NODEV, size); err != nil {
		return "", fmt.Errorf("resizing %s: %w", dir, err)
	}
	if err := os.MkdirAll(filepath.Join(dir, shareResolvDir), 0o711); err != nil {
		return "", err
	}
	dst := filepath.Join(dir, shareAgentName)
	tmp := dst + ".tmp"
	out, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o755)
	if err != nil {
		return "", err
	}
	if _, err := io.Copy(out, src); err != nil {
		out.Close()
		return "", fmt.Errorf("copying the agent binary: %w", err)
	}
	if err := out.Close(); err != nil {
		return "", err
	}
	// Replacing a busy executable by rename: sandboxes that run the old
	// copy keep it.
	if err := os.Rename(tmp, dst); err != nil {
		return "", err
	}
	return dst, nil
}

// closeShare unmounts the share tmpfs. Running sandboxes keep what they
// bind-mounted from it (their mounts hold the filesystem).
func closeShare(dataDir string) error {
	dir := filepath.Join(dataDir, shareDir)
	if err := unix.Unmount(dir, 0); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("unmounting %s: %w", dir, err)
	}
	return nil
}

// resolvConfPath returns where the resolv.conf of egress sandbox id lives.
func (b *Backend) resolvConfPath(id string) string {
	return filepath.Join(b.cfg.DataDir, shareDir, shareResolvDir, id)
}
