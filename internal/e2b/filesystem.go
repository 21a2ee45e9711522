package e2b

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io/fs"
	pathpkg "path"
	"strconv"
	"strings"
	"sync"

	"connectrpc.com/connect"

	"github.com/berth-sh/berth/internal/access"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/berth-sh/berth/internal/e2b/envdpb/filesystem"
	"github.com/berth-sh/berth/internal/engine"
	"github.com/berth-sh/berth/internal/engine/files"
	"github.com/berth-sh/berth/internal/errdefs"
)

// filesystemService is envd's filesystem.Filesystem over berth's file
// access (through the sandbox's agent).
type filesystemService struct{ d *Door }

// maxListDepth bounds ListDir's depth.
const maxListDepth = 16

// open resolves the request's paths against the home of the user the call
// names (every one checked before anything opens), then opens the target
// sandbox's files; the caller closes them.
func (s *filesystemService) open(ctx context.Context, h interface{ Get(string) string }, write bool, paths ...string) (*files.Files, []string, error) {
	user, err := userOfGetter(h)
	if err != nil {
		return nil, nil, err
	}
	user = s.d.defaultUser(ctx, user)
	abs := make([]string, len(paths))
	for i, p := range paths {
		if abs[i], err = absPath(p, user); err != nil {
			return nil, nil, err
		}
	}
	f, err := s.d.cfg.Manager.Files(ctx, targetOf(ctx).Sandbox, write, principalOf(ctx).Actor)
	if err != nil {
		return nil, nil, err
	}
	return f, abs, nil
}

// unary is a one-answer Filesystem call: fn over the target's files at
// the request's resolved paths, the files closed after, its error in
// Connect's terms.
// A call that writes names its REST route (action): it is audited as
// that route is, the same record whichever door it came through.
func unary[Req, Res any](ctx context.Context, s *filesystemService, req *connect.Request[Req], action access.Op, paths []string,
	fn func(f *files.Files, p []string) (*Res, error)) (*connect.Response[Res], error) {
	var out *Res
	call := func() error {
		f, p, err := s.open(ctx, req.Header(), action != "", paths...)
		if err != nil {
			return err
		}
		defer f.Close()
		out, err = fn(f, p)
		return err
	}
	var err error
	if action != "" {
		err = s.d.audited(ctx, req.Peer().Addr, principalOf(ctx), action, targetOf(ctx).Sandbox, nil, call)
	} else {
		err = call()
	}
	if err != nil {
		return nil, connectError(err)
	}
	return connect.NewResponse(out), nil
}

func userOfGetter(h interface{ Get(string) string }) (string, error) {
	hdr := map[string][]string{}
	if v := h.Get("Authorization"); v != "" {
		hdr["Authorization"] = []string{v}
	}
	return userOf(hdr)
}

func entryOf(fi engine.FileInfo) *pb.EntryInfo {
	mode := fs.FileMode(fi.Mode)
	e := &pb.EntryInfo{Name: fi.Name, Path: fi.Path, Size: fi.Size, Mode: uint32(mode.Perm()),
		Permissions: mode.String(), ModifiedTime: timestamppb.New(fi.ModTime)}
	switch {
	case fi.Link != "" || mode&fs.ModeSymlink != 0:
		e.Type = pb.FileType_FILE_TYPE_SYMLINK
		if fi.Link != "" {
			// envd answers the target as an absolute path.
			l := fi.Link
			if !strings.HasPrefix(l, "/") {
				l = pathpkg.Join(pathpkg.Dir(fi.Path), l)
			}
			e.SymlinkTarget = &l
		}
	case fi.IsDir:
		e.Type = pb.FileType_FILE_TYPE_DIRECTORY
	default:
		e.Type = pb.FileType_FILE_TYPE_FILE
	}
	if e.Name == "" {
		e.Name = pathpkg.Base(fi.Path)
	}
	if fi.UID != nil {
		e.Owner = ownerName(*fi.UID)
	}
	if fi.GID != nil {
		e.Group = ownerName(*fi.GID)
	}
	e.Metadata = metadataFrom(fi.Xattrs)
	return e
}

// ownerName is the name of uid or gid id in berth's builtin templates
// (root, and E2B's user at 1000); any other id as a number.
func ownerName(id uint32) string {
	switch id {
	case 0:
		return "root"
	case 1000:
		return E2BUser
	}
	return strconv.FormatUint(uint64(id), 10)
}

func (s *filesystemService) Stat(ctx context.Context, req *connect.Request[pb.StatRequest]) (*connect.Response[pb.StatResponse], error) {
	return unary(ctx, s, req, "", []string{req.Msg.GetPath()}, func(f *files.Files, p []string) (*pb.StatResponse, error) {
		fi, err := f.Stat(ctx, p[0])
		if err != nil {
			return nil, err
		}
		return &pb.StatResponse{Entry: entryOf(fi)}, nil
	})
}

func (s *filesystemService) MakeDir(ctx context.Context, req *connect.Request[pb.MakeDirRequest]) (*connect.Response[pb.MakeDirResponse], error) {
	return unary(ctx, s, req, access.FilesMkdir, []string{req.Msg.GetPath()}, func(f *files.Files, p []string) (*pb.MakeDirResponse, error) {
		if _, err := f.Stat(ctx, p[0]); err == nil {
			// The SDK's makeDir answers false for a directory already there.
			return nil, connect.NewError(connect.CodeAlreadyExists, errors.New(p[0]+" exists"))
		}
		made, err := s.d.mkdirs(ctx, f, p[0], principalOf(ctx).Actor)
		if err != nil {
			return nil, err
		}
		if user, err := userOfGetter(req.Header()); err == nil {
			s.d.giveTo(ctx, s.d.defaultUser(ctx, user), made)
		}
		fi, err := f.Stat(ctx, p[0])
		if err != nil {
			return nil, err
		}
		return &pb.MakeDirResponse{Entry: entryOf(fi)}, nil
	})
}

func (s *filesystemService) Move(ctx context.Context, req *connect.Request[pb.MoveRequest]) (*connect.Response[pb.MoveResponse], error) {
	return unary(ctx, s, req, access.FilesMove, []string{req.Msg.GetSource(), req.Msg.GetDestination()}, func(f *files.Files, p []string) (*pb.MoveResponse, error) {
		if err := f.Move(ctx, p[0], p[1], false, principalOf(ctx).Actor); err != nil {
			return nil, err
		}
		fi, err := f.Stat(ctx, p[1])
		if err != nil {
			return nil, err
		}
		return &pb.MoveResponse{Entry: entryOf(fi)}, nil
	})
}

func (s *filesystemService) ListDir(ctx context.Context, req *connect.Request[pb.ListDirRequest]) (*connect.Response[pb.ListDirResponse], error) {
	depth := int(req.Msg.GetDepth())
	if depth == 0 {
		depth = 1
	}
	if depth > maxListDepth {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("depth over "+strconv.Itoa(maxListDepth)))
	}
	return unary(ctx, s, req, "", []string{req.Msg.GetPath()}, func(f *files.Files, p []string) (*pb.ListDirResponse, error) {
		if fi, err := f.Stat(ctx, p[0]); err != nil {
			return nil, err
		} else if !fi.IsDir {
			return nil, connect.NewError(connect.CodeInvalidArgument, errors.New(p[0]+" is not a directory"))
		}
		out := &pb.ListDirResponse{}
		var walk func(dir string, level int) error
		walk = func(dir string, level int) error {
			ents, err := f.List(ctx, dir)
			if err != nil {
				return err
			}
			for _, fi := range ents {
				if fi.Path == "" {
					fi.Path = pathpkg.Join(dir, fi.Name)
				}
				out.Entries = append(out.Entries, entryOf(fi))
				if fi.IsDir && fi.Link == "" && level < depth {
					if err := walk(fi.Path, level+1); err != nil {
						return err
					}
				}
			}
			return nil
		}
		if err := walk(p[0], 1); err != nil {
			return nil, err
		}
		return out, nil
	})
}

func (s *filesystemService) Remove(ctx context.Context, req *connect.Request[pb.RemoveRequest]) (*connect.Response[pb.RemoveResponse], error) {
	return unary(ctx, s, req, access.FilesRemove, []string{req.Msg.GetPath()}, func(f *files.Files, p []string) (*pb.RemoveResponse, error) {
		// envd's remove of a path that is not there succeeds.
		if err := f.Remove(ctx, p[0], true, principalOf(ctx).Actor); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
			return nil, err
		}
		return &pb.RemoveResponse{}, nil
	})
}

// eventOf is E2B's event for one of berth's watch events; ok is false for
// what E2B has no name for (an overflow).
func eventOf(dir string, ev files.WatchEvent) (*pb.FilesystemEvent, bool) {
	var t pb.EventType
	switch ev.Type {
	case "create":
		t = pb.EventType_EVENT_TYPE_CREATE
	case "write":
		t = pb.EventType_EVENT_TYPE_WRITE
	case "remove":
		t = pb.EventType_EVENT_TYPE_REMOVE
	case "rename":
		t = pb.EventType_EVENT_TYPE_RENAME
	case "chmod":
		t = pb.EventType_EVENT_TYPE_CHMOD
	default:
		return nil, false
	}
	name := ev.Path
	if rel, ok := relTo(dir, ev.Path); ok {
		name = rel
	}
	return &pb.FilesystemEvent{Name: name, Type: t}, true
}

// withEntry adds the event's entry info (envd 0.6.3's includeEntry), best
// effort as envd's: a path gone by the time it is read (a remove, a
// rename's old name) has none.
func withEntry(ctx context.Context, f *files.Files, fe *pb.FilesystemEvent, p string) {
	if fe.Type == pb.EventType_EVENT_TYPE_REMOVE {
		return
	}
	if fi, err := f.Stat(ctx, p); err == nil {
		fe.Entry = entryOf(fi)
	}
}

// relTo is p relative to dir, E2B's event name.
func relTo(dir, p string) (string, bool) {
	dir = pathpkg.Clean(dir)
	if dir == "/" {
		return p[1:], len(p) > 1 && p[0] == '/'
	}
	if len(p) > len(dir)+1 && p[:len(dir)] == dir && p[len(dir)] == '/' {
		return p[len(dir)+1:], true
	}
	return "", false
}

// A watch's allowNetworkMounts (envd 0.6.4) is accepted and changes
// nothing: envd refuses to watch a network file system unless asked,
// because inotify misses changes made elsewhere; berth mounts none into a
// sandbox (volumes are the node's own directories), and every watch is
// the agent's inotify.

func (s *filesystemService) WatchDir(ctx context.Context, req *connect.Request[pb.WatchDirRequest], st *connect.ServerStream[pb.WatchDirResponse]) error {
	f, ps, err := s.open(ctx, req.Header(), false, req.Msg.GetPath())
	if err != nil {
		return connectError(err)
	}
	defer f.Close()
	p := ps[0]
	var mu sync.Mutex
	send := func(r *pb.WatchDirResponse) error {
		mu.Lock()
		defer mu.Unlock()
		return st.Send(r)
	}
	var sendErr error
	ready := func() {
		sendErr = send(&pb.WatchDirResponse{Event: &pb.WatchDirResponse_Start{Start: &pb.WatchDirResponse_StartEvent{}}})
	}
	err = f.Watch(ctx, p, req.Msg.GetRecursive(), ready, func(ev files.WatchEvent) error {
		if sendErr != nil {
			return sendErr
		}
		fe, ok := eventOf(p, ev)
		if !ok {
			return nil
		}
		if req.Msg.GetIncludeEntry() {
			withEntry(ctx, f, fe, ev.Path)
		}
		return send(&pb.WatchDirResponse{Event: &pb.WatchDirResponse_Filesystem{Filesystem: fe}})
	})
	if ctx.Err() != nil {
		return streamEnd(ctx)
	}
	if err != nil {
		return connectError(err)
	}
	return nil
}

// watchers are the polling watchers (CreateWatcher): each a watch running
// in the background whose events wait, bounded, for GetWatcherEvents.
type watchers struct {
	mu sync.Mutex
	m  map[string]*watcher
}

type watcher struct {
	sandbox string
	cancel  context.CancelFunc
	mu      sync.Mutex
	events  []*pb.FilesystemEvent
	err     error
	done    bool // its watch has ended (err says why)
}

// Bounds of the polling watchers: in all, per sandbox (so one sandbox's
// caller cannot take every slot), and events kept per watcher.
const (
	maxWatchers           = 256
	maxWatchersPerSandbox = 16
	maxWatcherEvents      = 4096
)

// admit reports whether a new watcher of sandbox sb fits, dropping
// watchers whose watch has ended and whose end nobody collected; the
// caller holds ws.mu.
func (ws *watchers) admit(sb string) bool {
	all, mine := 0, 0
	for id, w := range ws.m {
		w.mu.Lock()
		done := w.done
		w.mu.Unlock()
		if done {
			delete(ws.m, id)
			continue
		}
		all++
		if w.sandbox == sb {
			mine++
		}
	}
	return all < maxWatchers && mine < maxWatchersPerSandbox
}

func newWatchers() *watchers { return &watchers{m: map[string]*watcher{}} }

func (ws *watchers) closeAll() {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	for id, w := range ws.m {
		w.cancel()
		delete(ws.m, id)
	}
}

// get returns watcher id of sandbox sb (another sandbox's is not found).
func (ws *watchers) get(id, sb string) (*watcher, bool) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	w, ok := ws.m[id]
	return w, ok && w.sandbox == sb
}

func (s *filesystemService) CreateWatcher(ctx context.Context, req *connect.Request[pb.CreateWatcherRequest]) (*connect.Response[pb.CreateWatcherResponse], error) {
	f, ps, err := s.open(ctx, req.Header(), false, req.Msg.GetPath())
	if err != nil {
		return nil, connectError(err)
	}
	p := ps[0]
	ws := s.d.watch
	ws.mu.Lock()
	if !ws.admit(targetOf(ctx).Sandbox) {
		ws.mu.Unlock()
		f.Close()
		return nil, connectError(errdefs.Exhausted("at most %d watchers per sandbox and %d in all", maxWatchersPerSandbox, maxWatchers))
	}
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	id := hex.EncodeToString(b)
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	w := &watcher{sandbox: targetOf(ctx).Sandbox, cancel: cancel}
	ws.m[id] = w
	ws.mu.Unlock()
	ready := make(chan struct{})
	go func() {
		defer f.Close()
		err := f.Watch(wctx, p, req.Msg.GetRecursive(), func() { close(ready) }, func(ev files.WatchEvent) error {
			fe, ok := eventOf(p, ev)
			if !ok {
				return nil
			}
			if req.Msg.GetIncludeEntry() {
				withEntry(wctx, f, fe, ev.Path)
			}
			w.mu.Lock()
			defer w.mu.Unlock()
			if len(w.events) < maxWatcherEvents {
				w.events = append(w.events, fe)
			}
			return nil
		})
		w.mu.Lock()
		if err == nil && wctx.Err() == nil {
			err = errdefs.NotFound("the watched directory %s went away", p)
		}
		w.err, w.done = err, true
		w.mu.Unlock()
		select {
		case <-ready:
		default:
			close(ready)
		}
	}()
	select {
	case <-ready:
	case <-ctx.Done():
	}
	w.mu.Lock()
	werr := w.err
	w.mu.Unlock()
	if werr != nil {
		s.remove(id)
		return nil, connectError(werr)
	}
	return connect.NewResponse(&pb.CreateWatcherResponse{WatcherId: id}), nil
}

func (s *filesystemService) remove(id string) {
	ws := s.d.watch
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if w, ok := ws.m[id]; ok {
		w.cancel()
		delete(ws.m, id)
	}
}

func (s *filesystemService) GetWatcherEvents(ctx context.Context, req *connect.Request[pb.GetWatcherEventsRequest]) (*connect.Response[pb.GetWatcherEventsResponse], error) {
	w, ok := s.d.watch.get(req.Msg.GetWatcherId(), targetOf(ctx).Sandbox)
	if !ok {
		return nil, connect.NewError(connect.CodeNotFound, errors.New("watcher not found"))
	}
	w.mu.Lock()
	evs, err := w.events, w.err
	w.events = nil
	w.mu.Unlock()
	if len(evs) == 0 && err != nil {
		// The watch ended and its last events are read: the end is
		// told once and the watcher goes.
		s.remove(req.Msg.GetWatcherId())
		return nil, connectError(err)
	}
	return connect.NewResponse(&pb.GetWatcherEventsResponse{Events: evs}), nil
}

func (s *filesystemService) RemoveWatcher(ctx context.Context, req *connect.Request[pb.RemoveWatcherRequest]) (*connect.Response[pb.RemoveWatcherResponse], error) {
	if _, ok := s.d.watch.get(req.Msg.GetWatcherId(), targetOf(ctx).Sandbox); !ok {
		return nil, connect.NewError(connect.CodeNotFound, errors.New("watcher not found"))
	}
	s.remove(req.Msg.GetWatcherId())
	return connect.NewResponse(&pb.RemoveWatcherResponse{}), nil
}
