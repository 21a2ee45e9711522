// Package egressproxy is berth's transparent TLS proxy for egress-injected
// secrets (`--secret NAME=egress:HOST`). A sandbox holding such a
// reference sees only a placeholder (secrets.NewPlaceholder) in its env;
// its TCP 443 traffic to the addresses berth's resolver pinned for its
// allowed names is redirected (nftables DNAT) to the daemon's listener.
// The proxy:
//
//   - learns the original destination (SO_ORIGINAL_DST) and the sandbox
//     (the connection's source address, registered by Add);
//   - terminates TLS with a leaf certificate for the client's SNI signed
//     by the sandbox's own CA (ECDSA P-256; its key stays on the host), and
//     refuses an SNI the sandbox's DNS pin does not tie to the original
//     destination, so the proxy never dials what the allow-list does not
//     allow;
//   - reads HTTP/1.1 requests (HTTP/2 is not offered in ALPN), and in the
//     request headers only — not the request line, not bodies, not
//     trailers — replaces each placeholder whose secret names this host by
//     the value, resolved at that request, when both the SNI and the Host
//     header equal that host; every other request passes unchanged;
//   - forwards to the original destination over TLS verified against the
//     system roots (plus the daemon's --egress-ca-file, for tests), with
//     the SNI as server name; never without verification.
//
// Everything is bounded: connections per sandbox, the request head's size,
// idle time between requests, the dial and handshake times. Responses come
// back unchanged: a server that echoes the credential in its reply shows it
// to the sandbox, which trusts that host with the value anyway. A value
// with a control byte (CR, LF, NUL) is never put in a header: the request
// is refused. Port 80 is not intercepted: a secret never leaves in clear
// text.
package egressproxy
