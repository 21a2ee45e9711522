package engine

import (
	"context"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/agent"
)

// The agent's wire protocol and the runtime have their own types, so that
// the HTTP API can change without changing the bytes agents already
// running in sandboxes speak. These are the only places the engine turns
// one into the other.

func apiExit(e agent.Exit) api.ExecExit {
	return api.ExecExit{Code: e.Code, Signal: e.Signal, TimedOut: e.TimedOut, OOMKilled: e.OOMKilled, DurationMS: e.DurationMS}
}

func apiFileInfo(fi agent.FileInfo) api.FileInfo {
	return api.FileInfo{Name: fi.Name, Path: fi.Path, Size: fi.Size, Mode: fi.Mode, ModTime: fi.ModTime, IsDir: fi.IsDir, Link: fi.Link}
}

func apiFileInfos(fis []agent.FileInfo) []api.FileInfo {
	if fis == nil {
		return nil
	}
	out := make([]api.FileInfo, len(fis))
	for i, fi := range fis {
		out[i] = apiFileInfo(fi)
	}
	return out
}

// agentResizes forwards the API's terminal resizes to the agent client
// until in is closed or ctx (the exec's) ends; nil stays nil.
func agentResizes(ctx context.Context, in <-chan api.Resize) <-chan agent.Resize {
	if in == nil {
		return nil
	}
	out := make(chan agent.Resize)
	go func() {
		defer close(out)
		for {
			select {
			case rs, ok := <-in:
				if !ok {
					return
				}
				select {
				case out <- agent.Resize{Rows: rs.Rows, Cols: rs.Cols}:
				case <-ctx.Done():
					return
				}
			case <-ctx.Done():
				return
			}
		}
	}()
	return out
}
