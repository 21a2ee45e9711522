package agent

import (
	"context"
	"encoding/json"

	"github.com/berth-sh/berth/internal/agent/wire"
)

// WatchEvent is one change a watch reports (see wire.WatchEvent).
type WatchEvent = wire.WatchEvent

// Watch streams the changes under the directory path (its subtree with
// recursive) to each until ctx ends (nil then), each fails, or the watch
// ends: the directory went away (nil) or an error. ready, if not nil, is
// called once the agent watches, before any event. The agent is not
// trusted: events are capped in size and their types and paths checked.
// A watch is silent for as long as nothing changes, so it is exempt from
// the client's idle deadline, like exec.
func (c *Client) Watch(ctx context.Context, path string, recursive bool, ready func(), each func(WatchEvent) error) error {
	cc, err := c.open(ctx, wire.Request{Op: wire.OpWatch, Path: path, Recursive: recursive})
	if err != nil {
		return err
	}
	defer cc.close()
	if _, err := cc.expect(wire.FrameEnd); err != nil {
		return err
	}
	if ready != nil {
		ready()
	}
	for {
		t, p, err := cc.next()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		switch t {
		case wire.FrameEnd:
			return nil
		case wire.FrameResult:
			ev, err := DecodeWatchEvent(p)
			if err != nil {
				return err
			}
			if err := each(ev); err != nil {
				return err
			}
		default:
			return wire.ProtocolErrorf("unexpected %s frame in a watch", t)
		}
	}
}

// DecodeWatchEvent decodes and checks one event frame from an agent.
func DecodeWatchEvent(p []byte) (WatchEvent, error) {
	var ev WatchEvent
	if len(p) > wire.MaxWatchEventJSON {
		return ev, wire.ProtocolErrorf("watch event of %d bytes", len(p))
	}
	if err := json.Unmarshal(p, &ev); err != nil {
		return ev, wire.ProtocolErrorf("malformed watch event: %v", err)
	}
	switch ev.Type {
	case wire.WatchOverflow:
		return WatchEvent{Type: wire.WatchOverflow}, nil
	case wire.WatchCreate, wire.WatchWrite, wire.WatchRemove:
		ev.OldPath = ""
	case wire.WatchRename:
		if !validPath(ev.OldPath) {
			return ev, wire.ProtocolErrorf("watch event with a bad old path")
		}
	default:
		return ev, wire.ProtocolErrorf("watch event of unknown type %.32q", ev.Type)
	}
	if !validPath(ev.Path) {
		return ev, wire.ProtocolErrorf("watch event with a bad path")
	}
	return ev, nil
}

func validPath(p string) bool {
	if p == "" || p[0] != '/' || len(p) > wire.MaxPathBytes {
		return false
	}
	for i := 0; i < len(p); i++ {
		if p[i] == 0 {
			return false
		}
	}
	return true
}
