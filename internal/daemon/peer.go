package daemon

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"time"

	"github.com/berth-sh/berth/internal/peer"
	"github.com/berth-sh/berth/internal/server"
)

// listenPeer serves the peer listener (--peer-listen): the API for
// requests the other daemons of the shared store forward here, over
// mutual TLS with leaves of the peer CA (internal/peer); records this
// node's address in the store; and makes this daemon forward requests
// about the others' sandboxes to them.
func (d *Daemon) listenPeer() error {
	log := d.cfg.Logger
	path := d.cfg.PeerCA
	if path == "" {
		path = filepath.Join(d.cfg.DataDir, "peer-ca.pem")
	}
	ca, created, err := peer.LoadOrCreateCA(path)
	if err != nil {
		return err
	}
	if created {
		log.Warn("generated the peer CA: give the same file (--peer-ca) to every daemon sharing this store", "file", path)
	}
	node := d.engine.Config().Node
	id, err := peer.NewIdentity(ca, node)
	if err != nil {
		return err
	}
	l, err := net.Listen("tcp", d.cfg.PeerListen)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", d.cfg.PeerListen, err)
	}
	advertise := d.cfg.PeerAdvertise
	if advertise == "" {
		advertise = l.Addr().String()
	}
	if host, _, err := net.SplitHostPort(advertise); err != nil || host == "" || net.ParseIP(host).IsUnspecified() {
		l.Close()
		return fmt.Errorf("--peer-advertise %q: want the HOST:PORT the other daemons reach this one at (--peer-listen %s listens on every address)", advertise, d.cfg.PeerListen)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := d.Store.PutPeer(ctx, node, advertise); err != nil {
		l.Close()
		return fmt.Errorf("recording this node's peer address: %w", err)
	}
	// No connection edge here: every connection is a daemon holding a
	// leaf of the peer CA, checked in the handshake.
	d.lns = append(d.lns, tls.NewListener(l, id.ServerConfig()))
	d.servers = append(d.servers, &http.Server{
		Handler:           d.Server.PeerHandler(),
		ReadHeaderTimeout: d.cfg.ReadHeaderTimeout,
		IdleTimeout:       d.cfg.IdleTimeout,
		MaxHeaderBytes:    server.DefaultMaxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	})
	d.Server.Forward = &server.Forwarder{Identity: id, Addr: d.Store.GetPeer, Log: log}
	log.Info("listening", "peer", l.Addr().String(), "advertise", advertise, "node", node)
	return nil
}
