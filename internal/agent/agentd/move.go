package agentd

import "github.com/berth-sh/berth/internal/agent/wire"

// handleMove renames the request's Path to its Dest (rootfs.Move has the
// rules) and answers with an end frame.
func (s *server) handleMove(cn *conn) error {
	if err := s.root.Move(cn.req.Path, cn.req.Dest, cn.req.NoReplace); err != nil {
		return err
	}
	return cn.fw.Send(wire.FrameEnd, nil)
}
