package local

import (
	"bytes"
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

// shareMargin is the room the share keeps beyond its agent copies, for
// the small files of many sandboxes (resolv.conf files).
const shareMargin = 64 << 20

// openShare mounts (or reuses) the share tmpfs under dataDir and puts
// the agent binary into it. It returns the path of the copy.
//
// The share outlives a crash of the daemon, and a running sandbox pins
// the copy it bind-mounted even once the file is replaced (the kernel
// frees a replaced copy when its last mount goes). So a copy is made only
// when the binary changed: a daemon restarted on the same binary reuses
// the file its sandboxes already pin. And the share is sized from what it
// holds now, pinned copies included, plus one new copy, so that no number
// of crashes, restarts or upgrades leaves it too small to start in.
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
	dst := filepath.Join(dir, shareAgentName)
	tmp := dst + ".tmp"
	var used int64
	same := false
	if mounted {
		// A copy cut short by a crash is garbage.
		if err := os.Remove(tmp); err != nil && !errors.Is(err, os.ErrNotExist) {
			return "", err
		}
		var fs unix.Statfs_t
		if err := unix.Statfs(dir, &fs); err != nil {
			return "", err
		}
		used = int64(fs.Blocks-fs.Bfree) * fs.Bsize
		if same, err = sameFile(src, dst); err != nil {
			return "", err
		}
	}
	need := used + shareMargin
	if !same {
		need += st.Size()
	}
	// tmpfs takes memory only for what is written; the size is a cap.
	size := fmt.Sprintf("size=%d,nr_inodes=1048576", need)
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
	if same {
		return dst, nil
	}
	if _, err := src.Seek(0, io.SeekStart); err != nil {
		return "", err
	}
	out, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o755)
	if err != nil {
		return "", err
	}
	if _, err := io.Copy(out, src); err != nil {
		out.Close()
		_ = os.Remove(tmp)
		return "", fmt.Errorf("copying the agent binary: %w", err)
	}
	if err := out.Close(); err != nil {
		_ = os.Remove(tmp)
		return "", err
	}
	// Replacing a busy executable by rename: sandboxes that run the old
	// copy keep it until they end.
	if err := os.Rename(tmp, dst); err != nil {
		return "", err
	}
	return dst, nil
}

// sameFile reports whether the file at path holds exactly what src
// holds (read from its start).
func sameFile(src *os.File, path string) (bool, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	} else if err != nil {
		return false, err
	}
	defer f.Close()
	a, err := src.Stat()
	if err != nil {
		return false, err
	}
	b, err := f.Stat()
	if err != nil {
		return false, err
	}
	if !b.Mode().IsRegular() || a.Size() != b.Size() || b.Mode().Perm() != 0o755 {
		return false, nil
	}
	if _, err := src.Seek(0, io.SeekStart); err != nil {
		return false, err
	}
	bufA, bufB := make([]byte, 1<<20), make([]byte, 1<<20)
	for {
		n, errA := io.ReadFull(src, bufA)
		m, errB := io.ReadFull(f, bufB[:n])
		if m != n || !bytes.Equal(bufA[:n], bufB[:n]) {
			return false, nil
		}
		if errA == io.EOF || errA == io.ErrUnexpectedEOF {
			return true, nil
		}
		if errA != nil {
			return false, errA
		}
		if errB != nil {
			return false, errB
		}
	}
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
