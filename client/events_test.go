package client

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestReadSSE(t *testing.T) {
	in := "retry: 2000\n\n: ping\n\nid: 4\nevent: state\ndata: {\"id\":4}\n\n" +
		"id: 5\r\ndata: a\r\ndata:b\r\n\r\n" + "id: 6\rdata: x\r\r" + "data: no id\n\n" + "data: cut at the end"
	var got []string
	err := readSSE(strings.NewReader(in), func(f sseFrame) error {
		got = append(got, fmt.Sprintf("%s|%s|%q|%v", f.id, f.event, f.data, f.retry))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{`||""|2s`, `4|state|"{\"id\":4}"|0s`, `5||"a\nb"|0s`, `6||"x"|0s`, `6||"no id"|0s`}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("got  %q\nwant %q", got, want)
	}
	stop := errors.New("stop")
	if err := readSSE(strings.NewReader("data: 1\n\ndata: 2\n\n"), func(sseFrame) error { return stop }); err != stop {
		t.Fatalf("callback error: %v", err)
	}
	if err := readSSE(strings.NewReader("data: "+strings.Repeat("x", maxSSELine+1)+"\n\n"), func(sseFrame) error { return nil }); err == nil {
		t.Fatal("an over-long line was read")
	}
}

// FuzzReadSSE: any bytes are read without a panic, and every frame's
// data is made of the input's data lines (no LF or CR of its own but the
// joins), its retry non-negative.
func FuzzReadSSE(f *testing.F) {
	f.Add([]byte("retry: 2000\n\nid: 1\nevent: state\ndata: {}\n\n"))
	f.Add([]byte("id: 1\r\ndata: a\r\rdata\n\n:x\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		_ = readSSE(strings.NewReader(string(b)), func(fr sseFrame) error {
			if strings.ContainsRune(fr.data, '\r') || strings.ContainsAny(fr.id+fr.event, "\r\n") {
				t.Fatalf("frame %+v holds a line break", fr)
			}
			if fr.retry < 0 || fr.retry > time.Duration(1<<31)*time.Millisecond {
				t.Fatalf("retry %v", fr.retry)
			}
			return nil
		})
	})
}
