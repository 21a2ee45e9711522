package image

import (
	"os"
	"path/filepath"
	"strings"
)

// maxAlternatives bounds what HostAlternatives reads of a host's
// /etc/alternatives (Debian has some hundreds).
const maxAlternatives = 4096

// Symlink is one link of a layer berth makes: Name relative to the root
// of the layer, pointing at Target.
type Symlink struct {
	Name, Target string
}

// HostAlternatives returns the symlinks of dir (the host's
// /etc/alternatives) that point into /usr, sorted by name, as links under
// etc/alternatives/. Debian's commands and libraries in /usr reach their
// chosen implementation through them (/usr/bin/which, awk, libblas.so.3),
// and a sandbox on the built-in template has the host's /usr but not its
// /etc: without them those names dangle. Only the links are copied, never
// a file's content; a link pointing anywhere but /usr, through "..", and
// anything that is not a link are left out. A missing dir gives none.
func HostAlternatives(dir string) []Symlink {
	des, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var out []Symlink
	for _, de := range des {
		if de.Type()&os.ModeSymlink == 0 || len(out) >= maxAlternatives {
			continue
		}
		target, err := os.Readlink(filepath.Join(dir, de.Name()))
		if err != nil || !strings.HasPrefix(target, "/usr/") || strings.Contains(target, "/../") || strings.HasSuffix(target, "/..") {
			continue
		}
		out = append(out, Symlink{Name: "etc/alternatives/" + de.Name(), Target: target})
	}
	return out // ReadDir sorts by name
}
