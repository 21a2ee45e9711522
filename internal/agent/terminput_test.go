package agent

import (
	"bytes"
	"errors"
	"io"
	"testing"

	"github.com/berth-sh/berth/internal/agent/wire"
)

// The client sends a terminal input's bytes and resizes as frames in the
// order they were written, and a write larger than a frame over several.
func TestTermInputFramesInOrder(t *testing.T) {
	in := NewTermInput()
	big := bytes.Repeat([]byte("x"), wire.DataChunk+10)
	go func() {
		in.Write([]byte("ab"))
		in.Resize(Resize{Rows: 30, Cols: 100})
		in.Write([]byte("stty size\n"))
		in.Resize(Resize{Rows: 31, Cols: 101})
		in.Resize(Resize{Rows: 32, Cols: 102})
		in.Write(big)
		in.Close()
	}()
	var buf bytes.Buffer
	fw := wire.NewFrameWriter(&buf)
	if err := pumpInput(in, fw); err != io.EOF {
		t.Fatalf("pump: %v, want io.EOF", err)
	}
	fr := wire.NewFrameReader(&buf)
	var got []string
	for {
		typ, p, err := fr.Next()
		if err != nil {
			break
		}
		switch typ {
		case wire.FrameStdin:
			got = append(got, "in:"+string(p[:min(len(p), 10)]))
		case wire.FrameResize:
			got = append(got, "rs:"+string(p))
		}
	}
	want := []string{`in:ab`, `rs:{"rows":30,"cols":100}`, "in:stty size\n", `rs:{"rows":31,"cols":101}`, `rs:{"rows":32,"cols":102}`, `in:xxxxxxxxxx`, `in:xxxxxxxxxx`}
	if len(got) != len(want) {
		t.Fatalf("frames %q, want %q", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("frame %d: %q, want %q (all: %q)", i, got[i], want[i], got)
		}
	}
}

// Read skips resizes; the writer's error comes after the bytes written
// before it; a gone reader fails the writer rather than blocking it.
func TestTermInputEnds(t *testing.T) {
	in := NewTermInput()
	boom := errors.New("connection lost")
	go func() {
		in.Write([]byte("one"))
		in.Resize(Resize{Rows: 1, Cols: 1})
		in.Write([]byte("two"))
		in.CloseWithError(boom)
	}()
	b, err := io.ReadAll(struct{ io.Reader }{in})
	if string(b) != "onetwo" || !errors.Is(err, boom) {
		t.Fatalf("read %q %v, want onetwo and the writer's error", b, err)
	}
	if _, err := in.Write([]byte("late")); err != io.ErrClosedPipe {
		t.Fatalf("write after close: %v", err)
	}

	gone := NewTermInput()
	gone.CloseRead()
	if _, err := gone.Write([]byte("x")); err != io.ErrClosedPipe {
		t.Fatalf("write with no reader: %v", err)
	}
	if err := gone.Resize(Resize{Rows: 2, Cols: 2}); err != io.ErrClosedPipe {
		t.Fatalf("resize with no reader: %v", err)
	}
}
