package files

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"time"

	"github.com/coder/websocket"

	"github.com/berth-sh/berth/api"
	enginefiles "github.com/berth-sh/berth/internal/engine/files"
	"github.com/berth-sh/berth/internal/server/rest"
)

// Move renames path to to inside the sandbox by rename(2)'s rules;
// no_replace=true makes an existing destination a 409.
func (h *Handlers) Move(w http.ResponseWriter, r *http.Request) {
	path, err := pathParam(r)
	if err != nil {
		rest.Error(w, err)
		return
	}
	to, err := pathParamNamed(r, "to")
	if err != nil {
		rest.Error(w, err)
		return
	}
	noReplace, err := boolParam(r, "no_replace")
	if err != nil {
		rest.Error(w, err)
		return
	}
	f, err := h.E.Files(r.Context(), r.PathValue("id"), true, rest.Actor(r))
	if err != nil {
		rest.Error(w, err)
		return
	}
	defer f.Close()
	if err := f.Move(r.Context(), path, to, noReplace, rest.Actor(r)); err != nil {
		rest.Error(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// Watch streams the changes under the directory path (recursive=true:
// its subtree) as NDJSON lines of api.WatchEvent, or as WebSocket text
// messages when the request asks for an upgrade; the first event is
// "ready", the last "end" or "error". It runs until the client goes.
func (h *Handlers) Watch(w http.ResponseWriter, r *http.Request) {
	path, err := pathParam(r)
	if err != nil {
		rest.Error(w, err)
		return
	}
	recursive, err := boolParam(r, "recursive")
	if err != nil {
		rest.Error(w, err)
		return
	}
	f, err := h.E.Files(r.Context(), r.PathValue("id"), false, rest.Actor(r))
	if err != nil {
		rest.Error(w, err)
		return
	}
	defer f.Close()
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	var send func(api.WatchEvent) error
	if strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
		conn, err := websocket.Accept(w, r, &websocket.AcceptOptions{})
		if err != nil {
			return
		}
		defer conn.CloseNow()
		conn.SetReadLimit(4 << 10)
		// The client sends nothing; its read ends when it goes.
		go func() {
			for {
				if _, _, err := conn.Read(ctx); err != nil {
					cancel()
					return
				}
			}
		}()
		send = func(ev api.WatchEvent) error {
			b, err := json.Marshal(ev)
			if err != nil {
				return err
			}
			wctx, c := context.WithTimeout(ctx, 30*time.Second)
			defer c()
			return conn.Write(wctx, websocket.MessageText, b)
		}
		defer conn.Close(websocket.StatusNormalClosure, "")
	} else {
		nd := rest.NewNDJSON(w)
		send = func(ev api.WatchEvent) error { return nd.Send(ev) }
	}
	readySent := false
	err = f.Watch(ctx, path, recursive, func() { readySent = send(api.WatchEvent{Type: api.WatchReady, Path: path}) == nil },
		func(ev enginefiles.WatchEvent) error {
			return send(api.WatchEvent{Type: ev.Type, Path: ev.Path, OldPath: ev.OldPath, IsDir: ev.IsDir})
		})
	switch {
	case ctx.Err() != nil:
	case err != nil && !readySent && !strings.EqualFold(r.Header.Get("Upgrade"), "websocket"):
		rest.Error(w, err) // nothing streamed yet: a plain error answer
	case err != nil:
		_ = send(api.WatchEvent{Type: api.WatchError, Error: rest.StreamError(w, err)})
	default:
		_ = send(api.WatchEvent{Type: api.WatchEnd})
	}
}
