package e2b

import (
	"net"
	"strconv"
	"strings"
)

// EnvdPort is the port of envd, E2B's in-sandbox daemon: requests for it
// are served by berth itself; any other port is the sandbox's own.
const EnvdPort = 49983

// Target is the sandbox and port a data-plane request is for.
type Target struct {
	Sandbox string
	Port    int
}

// ParseTarget finds the data-plane target of a request: from its host
// name {port}-{sandboxID}.{domain} when domain is set and the host is
// under it, else from the E2b-Sandbox-Id and E2b-Sandbox-Port headers.
// ok is false for a control-plane request (neither is present, or the
// host is api.{domain}, the SDK's control URL under E2B_DOMAIN); err is
// set for a malformed target, which is never a control-plane request.
func ParseTarget(host, domain, hdrID, hdrPort string) (t Target, ok bool, err error) {
	if domain != "" {
		h := host
		if hh, _, e := net.SplitHostPort(host); e == nil {
			h = hh
		}
		h = strings.ToLower(strings.TrimSuffix(h, "."))
		if label, under := strings.CutSuffix(h, "."+domain); under && label != "api" {
			p, id, cut := strings.Cut(label, "-")
			if !cut || strings.Contains(label, ".") {
				return Target{}, true, errBadTarget
			}
			port, perr := parsePort(p)
			if perr != nil || !validID(id) {
				return Target{}, true, errBadTarget
			}
			return Target{Sandbox: id, Port: port}, true, nil
		}
	}
	if hdrID == "" && hdrPort == "" {
		return Target{}, false, nil
	}
	port, perr := parsePort(hdrPort)
	if perr != nil || !validID(hdrID) {
		return Target{}, true, errBadTarget
	}
	return Target{Sandbox: hdrID, Port: port}, true, nil
}

func parsePort(s string) (int, error) {
	if s == "" || len(s) > 5 || s[0] == '0' {
		return 0, errBadTarget
	}
	for i := range len(s) {
		if s[i] < '0' || s[i] > '9' {
			return 0, errBadTarget
		}
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > 65535 {
		return 0, errBadTarget
	}
	return n, nil
}

// validID accepts what can be a berth sandbox id or name reference: 1-64
// lowercase letters, digits, '-' and '_'.
func validID(id string) bool {
	if id == "" || len(id) > 64 {
		return false
	}
	for i := range len(id) {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}
