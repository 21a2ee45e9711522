package main

import (
	"fmt"
	"io"
	"os"

	"golang.org/x/term"

	"github.com/berth-sh/berth/api"
)

// importProgress prints an import's or a push's progress on w: one line
// rewritten in place on a terminal; on anything else a plain line when a
// layer starts and when it is done. Each line ends with the totals over
// all layers when the daemon knows them.
type importProgress struct {
	w          io.Writer
	tty        bool
	started    map[int]bool
	dirty      bool
	cachedText string // what a cached layer is: "already present" (in the store)
}

func newImportProgress(w io.Writer) *importProgress {
	p := &importProgress{w: w, started: map[int]bool{}, cachedText: "already present"}
	if f, ok := w.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		p.tty = true
	}
	return p
}

func (p *importProgress) report(ev api.ImportProgress) {
	id := ev.Digest
	if len(id) > 19 {
		id = id[:19] // sha256: and 12 hex digits
	}
	size := "?"
	if ev.Size > 0 {
		size = formatSize(ev.Size)
	}
	var line string
	switch {
	case ev.Cached:
		line = fmt.Sprintf("layer %d/%d %s: %s", ev.Layer, ev.Layers, id, p.cachedText)
	case ev.Done:
		line = fmt.Sprintf("layer %d/%d %s: done, %s", ev.Layer, ev.Layers, id, formatSize(ev.Bytes))
	default:
		line = fmt.Sprintf("layer %d/%d %s: %s of %s", ev.Layer, ev.Layers, id, formatSize(ev.Bytes), size)
	}
	if ev.TotalSize > 0 {
		line += fmt.Sprintf(" (all layers: %s of %s)", formatSize(ev.TotalBytes), formatSize(ev.TotalSize))
	}
	if p.tty {
		fmt.Fprintf(p.w, "\r\x1b[K%s", line)
		p.dirty = true
		if ev.Done {
			fmt.Fprintln(p.w)
			p.dirty = false
		}
		return
	}
	if ev.Done || !p.started[ev.Layer] {
		p.started[ev.Layer] = true
		fmt.Fprintln(p.w, line)
	}
}

// finish ends a line left open on a terminal.
func (p *importProgress) finish() {
	if p.dirty {
		fmt.Fprintln(p.w)
		p.dirty = false
	}
}
