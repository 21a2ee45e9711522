package api

import "io/fs"

// File types of FileInfo.Type.
const (
	FileTypeFile    = "file"
	FileTypeDir     = "dir"
	FileTypeSymlink = "symlink"
	FileTypeFIFO    = "fifo"
	FileTypeSocket  = "socket"
	FileTypeChar    = "char"
	FileTypeBlock   = "block"
)

// FileType names the type of Go file mode bits m.
func FileType(m fs.FileMode) string {
	switch {
	case m&fs.ModeDir != 0:
		return FileTypeDir
	case m&fs.ModeSymlink != 0:
		return FileTypeSymlink
	case m&fs.ModeNamedPipe != 0:
		return FileTypeFIFO
	case m&fs.ModeSocket != 0:
		return FileTypeSocket
	case m&fs.ModeCharDevice != 0:
		return FileTypeChar
	case m&fs.ModeDevice != 0:
		return FileTypeBlock
	}
	return FileTypeFile
}

// PosixPermissions returns the POSIX permission number of Go file mode
// bits m: the rwx bits with setuid 0o4000, setgid 0o2000 and sticky 0o1000
// (a directory 0755 is 493).
func PosixPermissions(m fs.FileMode) uint32 {
	p := uint32(m.Perm())
	if m&fs.ModeSetuid != 0 {
		p |= 0o4000
	}
	if m&fs.ModeSetgid != 0 {
		p |= 0o2000
	}
	if m&fs.ModeSticky != 0 {
		p |= 0o1000
	}
	return p
}

// ModeString renders Go file mode bits m as ls -l does: a type letter
// (- d l p s c b) and the nine permission letters, with s/S and t/T for
// the set-id and sticky bits ("drwxr-xr-x", "-rwsr-xr-x", "drwxrwxrwt").
func ModeString(m fs.FileMode) string {
	b := []byte("----------")
	switch FileType(m) {
	case FileTypeDir:
		b[0] = 'd'
	case FileTypeSymlink:
		b[0] = 'l'
	case FileTypeFIFO:
		b[0] = 'p'
	case FileTypeSocket:
		b[0] = 's'
	case FileTypeChar:
		b[0] = 'c'
	case FileTypeBlock:
		b[0] = 'b'
	}
	const rwx = "rwxrwxrwx"
	for i := range 9 {
		if m&(1<<uint(8-i)) != 0 {
			b[i+1] = rwx[i]
		}
	}
	special := func(i int, set bool, lower, upper byte) {
		if !set {
			return
		}
		if b[i] == 'x' {
			b[i] = lower
		} else {
			b[i] = upper
		}
	}
	special(3, m&fs.ModeSetuid != 0, 's', 'S')
	special(6, m&fs.ModeSetgid != 0, 's', 'S')
	special(9, m&fs.ModeSticky != 0, 't', 'T')
	return string(b)
}
