package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/engine"
	"github.com/berth-sh/berth/internal/engine/snapshots"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/sandbox"
	"github.com/berth-sh/berth/internal/server/idempotency"
	"github.com/berth-sh/berth/internal/server/rest"
	"github.com/berth-sh/berth/internal/server/sandboxes"
	"github.com/berth-sh/berth/internal/store"
)

// The Idempotency-Key machinery is internal/server/idempotency's; here
// are the server's parts of it: the store, and for each create route how
// many ids it makes and what a dead first attempt made.

// IdempotencyHeader is the request header carrying the key.
const IdempotencyHeader = idempotency.Header

// IdempotentReplayedHeader marks an answer replayed from a stored key.
const IdempotentReplayedHeader = idempotency.ReplayedHeader

// MaxIdempotencyKey is the longest key accepted, in bytes.
const MaxIdempotencyKey = idempotency.MaxKey

// ParseIdempotencyKey returns the request's key and whether it has one.
func ParseIdempotencyKey(h http.Header) (string, bool, error) { return idempotency.ParseKey(h) }

// idemState is a server's Idempotency-Key attempts.
type idemState struct {
	// store and node, if set, stand in for the engine's (tests).
	store store.Store
	node  string
	once  sync.Once
	keys  idempotency.Keys
}

// idemBackend is the store keys are kept in and this daemon's node;
// a nil store: keys are not served.
func (s *Server) idemBackend() (store.Store, string) {
	if s.idem.store != nil {
		return s.idem.store, s.idem.node
	}
	if s.m == nil {
		return nil, ""
	}
	return s.m.Store(), s.m.Node()
}

// idempotent wraps a create handler with Idempotency-Key handling.
func (s *Server) idempotent(kind idempotency.Kind, h http.HandlerFunc) http.HandlerFunc {
	s.idem.once.Do(func() {
		s.idem.keys.Config = idempotency.Config{
			Backend: func() (idempotency.Store, string) {
				st, node := s.idemBackend()
				if st == nil {
					return nil, node
				}
				return st, node
			},
			MaxBody: maxJSONBody, NewID: engine.NewID,
			Seal: s.sealLeases, Unseal: s.unsealLeases,
			WriteError: rest.Error, WriteJSON: rest.JSON,
			Log: func() *slog.Logger { return s.log },
		}
	})
	return s.idem.keys.Wrap(kind, h)
}

// sealLeases keeps lease tokens (credentials) out of stored answers: each
// is replaced by a marker naming its sandbox, and replay mints it again
// (tokens are a function of the id), so the replay is still byte for
// byte the first answer.
func (s *Server) sealLeases(body []byte, ids []string) []byte {
	if s.Leases == nil {
		return body
	}
	for _, id := range ids {
		body = bytes.ReplaceAll(body, []byte(s.Leases.Token(id)), []byte(leaseMarker(id)))
	}
	return body
}

func (s *Server) unsealLeases(body []byte, ids []string) []byte {
	if s.Leases == nil {
		return body
	}
	for _, id := range ids {
		body = bytes.ReplaceAll(body, []byte(leaseMarker(id)), []byte(s.Leases.Token(id)))
	}
	return body
}

func leaseMarker(id string) string { return "@@berth-lease-token:" + id + "@@" }

// settled returns the sandbox id once it is no longer being created, nil
// if there is none (or only a warm-pool member never handed out).
func (s *Server) settled(ctx context.Context, id string) (*sandbox.Sandbox, error) {
	st, _ := s.idemBackend()
	deadline := time.Now().Add(idempotency.Wait)
	for {
		sb, err := st.GetSandbox(ctx, rest.OwnerOf(ctx), id)
		if errors.Is(err, errdefs.ErrNotFound) {
			return nil, nil
		} else if err != nil {
			return nil, err
		}
		if sb.Spec.Pool != "" {
			return nil, nil
		}
		if sb.State != sandbox.StateCreating {
			return sb, nil
		}
		if time.Now().After(deadline) {
			return nil, idempotency.ErrInProgress
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(idempotency.Poll):
		}
	}
}

// createFailed is the answer for a sandbox whose interrupted create
// failed when it was finished: a 5xx, as the first attempt would have
// had, so the key is released and a retry creates anew.
func createFailed(sb *sandbox.Sandbox) (int, any, bool, error) {
	return http.StatusInternalServerError, api.ErrorBody{Error: api.Error{Code: "internal",
		Message: "creating sandbox " + sb.ID + " (finished after a daemon restart) failed: " + sb.Error}}, true, nil
}

func one([]byte) int { return 1 }

func (s *Server) idemCreate() idempotency.Kind {
	return idempotency.Kind{IDs: one, Found: func(ctx context.Context, r *http.Request, _ []byte, rec *store.IdempotencyKey) (int, any, bool, error) {
		if len(rec.IDs) != 1 {
			return 0, nil, false, nil
		}
		sb, err := s.settled(ctx, rec.IDs[0])
		if err != nil || sb == nil {
			return 0, nil, false, err
		}
		if !sb.State.Live() && sb.Error != "" {
			return createFailed(sb)
		}
		out := s.sandboxes.ToAPI(sb)
		if out.LeaseToken, err = s.createLease(ctx, sb, rest.Principal(r)); err != nil {
			return 0, nil, false, err
		}
		return http.StatusCreated, out, true, nil
	}}
}

func (s *Server) idemFork() idempotency.Kind {
	count := func(body []byte) int {
		var req struct {
			Count int `json:"count"`
		}
		_ = json.Unmarshal(body, &req)
		switch {
		case req.Count == 0:
			return 1
		case req.Count < 0 || req.Count > snapshots.MaxForkCount:
			return 0 // refused by the engine
		}
		return req.Count
	}
	return idempotency.Kind{IDs: count, Found: func(ctx context.Context, r *http.Request, _ []byte, rec *store.IdempotencyKey) (int, any, bool, error) {
		resp := api.ForkResponse{Children: []api.Sandbox{}}
		var failed *sandbox.Sandbox
		for _, id := range rec.IDs {
			sb, err := s.settled(ctx, id)
			if err != nil {
				return 0, nil, false, err
			}
			switch {
			case sb == nil:
			case !sb.State.Live() && sb.Error != "":
				failed = sb
			default:
				resp.Children = append(resp.Children, s.sandboxes.ToAPI(sb))
			}
		}
		if len(resp.Children) == 0 {
			if failed != nil {
				return createFailed(failed)
			}
			return 0, nil, false, nil
		}
		return http.StatusCreated, resp, true, nil
	}}
}

func (s *Server) idemSnapshot() idempotency.Kind {
	return idempotency.Kind{IDs: one, Found: func(ctx context.Context, r *http.Request, _ []byte, rec *store.IdempotencyKey) (int, any, bool, error) {
		if len(rec.IDs) != 1 {
			return 0, nil, false, nil
		}
		sn, err := s.m.Store().GetSnapshot(ctx, rest.OwnerOf(ctx), rec.IDs[0])
		if errors.Is(err, errdefs.ErrNotFound) {
			return 0, nil, false, nil
		} else if err != nil {
			return 0, nil, false, err
		}
		return http.StatusCreated, sandboxes.SnapshotToAPI(sn), true, nil
	}}
}

// idemVolume: a volume's name is its identity (unique per tenant), so a
// dead attempt's volume is the one of that name made since the key was.
func (s *Server) idemVolume() idempotency.Kind {
	return idempotency.Kind{IDs: func([]byte) int { return 0 }, Found: func(ctx context.Context, r *http.Request, body []byte, rec *store.IdempotencyKey) (int, any, bool, error) {
		var req api.CreateVolumeRequest
		if json.Unmarshal(body, &req) != nil || req.Name == "" {
			return 0, nil, false, nil
		}
		v, err := s.m.Store().GetVolumeByName(ctx, rest.OwnerOf(ctx), req.Name)
		if errors.Is(err, errdefs.ErrNotFound) {
			return 0, nil, false, nil
		} else if err != nil {
			return 0, nil, false, err
		}
		if v.CreatedAt.Before(rec.CreatedAt) {
			return 0, nil, false, nil // older: the retry's create will say the name is taken
		}
		return http.StatusCreated, s.sandboxes.VolumeToAPI(v), true, nil
	}}
}
