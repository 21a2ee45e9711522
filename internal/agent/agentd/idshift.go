package agentd

import (
	"archive/tar"
	"io"

	"github.com/berth-sh/berth/internal/agent/wire"
)

// IDShift maps host ids to a sandbox's own: the daemon's in-process agent
// server that reads a quarantined sandbox's files from the host
// (hostfiles) sees them owned by the sandbox's host id range, and reports
// them as the sandbox sees them. Host ids in [Base, Base+Size) become
// id-Base; any other, unmapped in the sandbox, the overflow id 65534, as
// the kernel shows it there.
type IDShift struct {
	Base, Size uint32
}

// overflowID is what a user namespace shows for an unmapped id.
const overflowID = 65534

func (m *IDShift) id(host uint32) uint32 {
	if host >= m.Base && host-m.Base < m.Size {
		return host - m.Base
	}
	return overflowID
}

// info shifts a file info's owner (nil m: as it is).
func (m *IDShift) info(fi *wire.FileInfo) {
	if m == nil {
		return
	}
	if fi.UID != nil {
		u := m.id(*fi.UID)
		fi.UID = &u
	}
	if fi.GID != nil {
		g := m.id(*fi.GID)
		fi.GID = &g
	}
}

// tarWriter returns where to write a tar archive bound for w so that its
// owners come out shifted, and a wait for the shifting to finish (its
// error); nil m writes to w directly.
func (m *IDShift) tarWriter(w io.Writer) (io.WriteCloser, func() error) {
	if m == nil {
		return nopCloser{w}, func() error { return nil }
	}
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		err := m.retar(pr, w)
		pr.CloseWithError(io.ErrClosedPipe)
		done <- err
	}()
	return pw, func() error { return <-done }
}

// retar copies the archive r to w with shifted owners.
func (m *IDShift) retar(r io.Reader, w io.Writer) error {
	tr := tar.NewReader(r)
	tw := tar.NewWriter(w)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return tw.Close()
		}
		if err != nil {
			return err
		}
		hdr.Uid, hdr.Gid = int(m.id(uint32(hdr.Uid))), int(m.id(uint32(hdr.Gid)))
		hdr.Uname, hdr.Gname = "", ""
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if _, err := io.Copy(tw, tr); err != nil {
			return err
		}
	}
}

type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }
