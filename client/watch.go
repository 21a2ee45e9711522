package client

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"

	"github.com/coder/websocket"

	"github.com/berth-sh/berth/api"
)

// WatchWS is Watch over a WebSocket (GET files/watch with an upgrade):
// each event is one text message; the same events and ends as Watch.
func (c *Client) WatchWS(ctx context.Context, id, path string, recursive bool, each func(api.WatchEvent) error) error {
	q := url.Values{"path": {path}}
	if recursive {
		q.Set("recursive", "true")
	}
	h := http.Header{}
	c.setHeaders(h)
	conn, resp, err := websocket.Dial(ctx, c.url(filesPath(id)+"/watch", q), &websocket.DialOptions{HTTPClient: c.hc, HTTPHeader: h})
	if err != nil {
		if resp != nil && resp.StatusCode != http.StatusSwitchingProtocols {
			return decodeError(resp)
		}
		return c.transportError(ctx, err)
	}
	defer conn.CloseNow()
	conn.SetReadLimit(64 << 10)
	for {
		typ, msg, err := conn.Read(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("watch %s: the stream ended without an end event: %w", path, err)
		}
		if typ != websocket.MessageText {
			continue
		}
		var ev api.WatchEvent
		if err := json.Unmarshal(msg, &ev); err != nil {
			return fmt.Errorf("watch %s: %w", path, err)
		}
		switch ev.Type {
		case api.WatchEnd:
			conn.Close(websocket.StatusNormalClosure, "")
			return nil
		case api.WatchError:
			if ev.Error != nil {
				return apiError(ev.Error)
			}
			return fmt.Errorf("watch %s failed", path)
		}
		if err := each(ev); err != nil {
			conn.Close(websocket.StatusNormalClosure, "")
			return err
		}
	}
}
