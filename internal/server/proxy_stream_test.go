package server

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestPortProxyStreamsAnswerBeforeBodyEOF: a sandbox server that answers
// as soon as it has read a POST's Content-Length bytes, HTTP/1.0 with the
// body ended by its close and written in pieces (as the code interpreter's
// /execute streams NDJSON), reaches the client whole, every time. Before
// the proxy turned on full duplex, net/http's server consumed and closed
// the request body when the answer's header went out while the transport
// was still reading it for EOF; the transport then dropped the upstream
// connection and the client saw its answer cut (#16: undici's
// "terminated").
func TestPortProxyStreamsAnswerBeforeBodyEOF(t *testing.T) {
	e := newTenv(t)
	e.tenant("a")
	ka := e.key("local", "a", "member")
	sb := e.sandbox(ka.Key, `{"template":"base"}`)
	const lines = 20
	e.node.Listen(sb.ID, 49999, func(c net.Conn) {
		defer c.Close()
		br := bufio.NewReader(c)
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		if _, err := io.CopyN(io.Discard, req.Body, req.ContentLength); err != nil {
			return
		}
		if _, err := io.WriteString(c, "HTTP/1.0 200 OK\r\nContent-Type: application/x-ndjson\r\nConnection: close\r\n\r\n"); err != nil {
			return
		}
		for i := range lines {
			if _, err := fmt.Fprintf(c, "{\"n\":%d}\n", i); err != nil {
				return
			}
			if i%5 == 0 {
				time.Sleep(time.Millisecond)
			}
		}
	})
	hc := &http.Client{Timeout: 30 * time.Second}
	body := `{"code":"x = 1"}`
	for i := range 300 {
		req, _ := http.NewRequest("POST", e.tcp.URL+"/v1/sandboxes/"+sb.ID+"/ports/49999/execute", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+ka.Key)
		req.Header.Set("Content-Type", "application/json")
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 || strings.Count(string(b), "\n") != lines ||
			!strings.HasSuffix(string(b), "{\"n\":"+strconv.Itoa(lines-1)+"}\n") {
			t.Fatalf("request %d: %d, %d lines, err %v: the answer was cut\n%s", i, resp.StatusCode, strings.Count(string(b), "\n"), err, b)
		}
	}
}
