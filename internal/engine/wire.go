package engine

import (
	"context"
	"math"
	"time"

	"github.com/berth-sh/berth/internal/agent"
)

// The agent's wire protocol has its own types, so that the engine's (and
// the HTTP API's) can change without changing the bytes agents already
// running in sandboxes speak. These are the only places the engine turns
// one into the other.

func exitOf(e agent.Exit) Exit {
	return Exit{Code: e.Code, Signal: e.Signal, TimedOut: e.TimedOut, OOMKilled: e.OOMKilled, Duration: msDuration(e.DurationMS)}
}

// msDuration is the agent's wall time in milliseconds (whole microseconds
// / 1000) as a Duration of whole microseconds, so that
// float64(d.Microseconds())/1000 gives back the very number.
func msDuration(ms float64) time.Duration {
	return time.Duration(math.Round(ms*1000)) * time.Microsecond
}

// FileInfoOf and FileInfosOf are the engine's form of the agent's file info.
func FileInfoOf(fi agent.FileInfo) FileInfo       { return fileInfoOf(fi) }
func FileInfosOf(fis []agent.FileInfo) []FileInfo { return fileInfosOf(fis) }

func fileInfoOf(fi agent.FileInfo) FileInfo {
	return FileInfo{Name: fi.Name, Path: fi.Path, Size: fi.Size, Mode: fi.Mode, ModTime: fi.ModTime, IsDir: fi.IsDir, Link: fi.Link, UID: fi.UID, GID: fi.GID, Xattrs: fi.Xattrs}
}

func fileInfosOf(fis []agent.FileInfo) []FileInfo {
	if fis == nil {
		return nil
	}
	out := make([]FileInfo, len(fis))
	for i, fi := range fis {
		out[i] = fileInfoOf(fi)
	}
	return out
}

// agentResizes forwards the caller's terminal resizes to the agent client
// until in is closed or ctx (the exec's) ends; nil stays nil.
func agentResizes(ctx context.Context, in <-chan Resize) <-chan agent.Resize {
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
