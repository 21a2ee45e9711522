// Package atomicfile writes the daemon's own small files (keys,
// certificates, state) so that a reader or a crash sees the old content
// or the new, never a part: github.com/google/renameio does the work (a
// randomly named O_EXCL temp file, fsync, rename over the target). This
// package only fixes its options for every caller: the temp file lies in
// the target's directory (not $TMPDIR, which may be shared and on another
// mount), and the file gets exactly the mode asked, whatever the umask or
// the mode of the file it replaces. The rename replaces a symlink at path
// rather than following it.
package atomicfile

import (
	"os"
	"path/filepath"

	"github.com/google/renameio/v2"
)

// Write replaces path with data, of mode perm.
func Write(path string, data []byte, perm os.FileMode) error {
	f, err := renameio.NewPendingFile(path, renameio.WithTempDir(filepath.Dir(path)), renameio.WithStaticPermissions(perm))
	if err != nil {
		return err
	}
	defer f.Cleanup()
	if _, err := f.Write(data); err != nil {
		return err
	}
	return f.CloseAtomicallyReplace()
}
