package attack

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// RawClient sends requests exactly as written (no client-side path
// cleaning or escaping), with a chosen credential.
type RawClient struct {
	base   string // http://berth for a unix socket, else the http(s) base
	apiKey string
	hc     *http.Client
}

func newRawClient(host, apiKey string) (*RawClient, error) {
	u, err := url.Parse(host)
	if err != nil {
		return nil, err
	}
	tr := &http.Transport{DisableKeepAlives: true}
	r := &RawClient{apiKey: apiKey, hc: &http.Client{Transport: tr, Timeout: 60 * time.Second}}
	switch u.Scheme {
	case "unix":
		sock := u.Path
		tr.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		}
		r.base = "http://berth"
	case "http", "https":
		r.base = strings.TrimSuffix(host, "/")
	case "tcp":
		r.base = "http://" + u.Host
	default:
		return nil, fmt.Errorf("host %q: unsupported scheme", host)
	}
	return r, nil
}

// TCPRaw is a raw client on an http:// base with no key.
func TCPRaw(base string) *RawClient {
	return &RawClient{base: strings.TrimSuffix(base, "/"),
		hc: &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 60 * time.Second}}
}

// NoKey is the credential value that sends no Authorization header.
const NoKey = "\x00none"

// Do sends method rawPath (already escaped as it must appear on the wire)
// with token as bearer ("" = the client's key, NoKey = none; a port token,
// berth_port_..., goes in the X-Berth-Port-Token header as the
// path-routed proxy takes it). It returns
// the status and up to 64 KiB of the body.
func (r *RawClient) Do(ctx context.Context, method, rawPath, token string, body any) (int, string, error) {
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case []byte:
		rd = bytes.NewReader(b)
	case io.Reader:
		rd = b
	default:
		j, err := json.Marshal(b)
		if err != nil {
			return 0, "", err
		}
		rd = bytes.NewReader(j)
	}
	req, err := http.NewRequestWithContext(ctx, method, r.base+"/", rd)
	if err != nil {
		return 0, "", err
	}
	// Opaque keeps the path byte for byte (%2F stays %2F, .. stays ..).
	req.URL.Opaque = "//" + req.URL.Host + rawPath
	if body != nil {
		if _, ok := body.(io.Reader); ok {
			req.Header.Set("Content-Type", "application/x-tar")
		} else {
			req.Header.Set("Content-Type", "application/json")
		}
	}
	switch token {
	case NoKey:
	case "":
		if r.apiKey != "" {
			req.Header.Set("Authorization", "Bearer "+r.apiKey)
		}
	default:
		if strings.HasPrefix(token, "berth_port_") {
			req.Header.Set("X-Berth-Port-Token", token)
		} else {
			req.Header.Set("Authorization", "Bearer "+token)
		}
	}
	resp, err := r.hc.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	return resp.StatusCode, string(b), nil
}
