package daemon

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strings"

	"github.com/berth-sh/berth/internal/e2b"
	"github.com/berth-sh/berth/internal/server"
)

// listenE2B opens the --e2b-listen door: E2B's APIs over the same
// manager, credentials, audit and port proxy as the REST server, behind
// the same connection edge (per-client cap, net/http's own answers
// rewritten) and the same header and idle deadlines.
func (d *Daemon) listenE2B() error {
	log := d.cfg.Logger
	d.e2b = e2b.New(e2b.Config{Manager: d.engine, Templates: d.engine, Server: d.Server, WithCaller: server.WithCaller, Audit: d.Server.Audit,
		Log: log.With("component", "e2b"), Domain: strings.ToLower(strings.TrimSuffix(d.cfg.E2BDomain, ".")),
		StateDir: filepath.Join(d.cfg.DataDir, "e2b")})
	l, err := net.Listen("tcp", d.cfg.E2BListen)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", d.cfg.E2BListen, err)
	}
	scheme := "http"
	if d.cfg.E2BCert != "" || d.cfg.E2BKey != "" {
		cert, err := tls.LoadX509KeyPair(d.cfg.E2BCert, d.cfg.E2BKey)
		if err != nil {
			l.Close()
			return fmt.Errorf("--e2b-cert/--e2b-key: %w", err)
		}
		l, scheme = tls.NewListener(l, tlsConfig(cert)), "https"
	} else if !isLoopback(d.cfg.E2BListen) {
		log.Warn("serving the E2B API as plain HTTP on a non-loopback address: keys and tokens cross the network in clear", "addr", l.Addr().String())
	}
	max := d.cfg.MaxConnsPerClient
	if max < 0 {
		max = 0
	}
	d.lns = append(d.lns, d.Server.Listener(l, max))
	d.servers = append(d.servers, &http.Server{
		Handler:           d.e2b,
		ReadHeaderTimeout: d.cfg.ReadHeaderTimeout,
		ConnContext:       server.ConnContext,
		IdleTimeout:       d.cfg.IdleTimeout,
		MaxHeaderBytes:    server.DefaultMaxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(d.cfg.Logger.Handler(), slog.LevelWarn),
	})
	log.Info("listening", "e2b", scheme+"://"+l.Addr().String(), "domain", d.cfg.E2BDomain)
	return nil
}
