// Package nflog reads one NFLOG group over nfnetlink: each packet the
// kernel logged to it, with its log prefix, protocol, addresses and ports.
// It is the source of internal/network's flow log; NFLOG rather than
// conntrack events because one mechanism then reports both decisions
// (denied packets never create a conntrack entry) and the prefix carries
// the reason or the allowing rule.
package nflog
