package e2b

// E2B's template build API (the JS SDK's Template().fromImage(...)...,
// Template.build) over berth's Dockerfile builds: a build is requested
// (POST /v3/templates), the files of its copy steps uploaded once per
// content hash (GET /templates/{id}/files/{hash} gives a one-time upload
// URL), started with its steps (POST /v2/templates/{id}/builds/{build}) and
// followed by its status and logs (GET .../status). The steps become one
// Dockerfile over a build context holding the uploads (dockerfile below),
// built by the engine's BuildDockerfile with the caller's tenant, rights
// and quotas, as `berth template build -f` builds it. The start command
// becomes the template's supervised service.
//
// E2B's tags are berth templates: the build of name:tag makes berth's
// template name.tag (E2B's own default tag, or none, the template name),
// labelled with its E2B name, tag and build id (tagLabels), and a tag
// assigned later is a template of the tagged one's layers (assignTags).
//
// A build's record (its state, reason and log) is kept in the door's
// state directory as well as in memory, written at each change of state
// and step: a daemon restart keeps the status of the builds it knew, and
// ends a build in progress as an error saying so (loadBuilds). Uploads
// live in memory only: a restart forgets them.

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/berth-sh/berth/internal/access"
	"github.com/berth-sh/berth/internal/auth"
	"github.com/berth-sh/berth/internal/engine/templates"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/sandbox"
	"github.com/berth-sh/berth/internal/store"
)

// TemplateBuilder is the engine's half of template builds the door uses.
type TemplateBuilder interface {
	BuildDockerfile(ctx context.Context, req *templates.DockerfileRequest, actor string, progress func(templates.Event)) (*store.Template, error)
	ResolveTemplate(ctx context.Context, tenant, name string) (*store.Template, error)
	// ListTemplates and DeleteTemplate act as ctx's caller: its own
	// templates and the shared ones it sees; its own removed.
	ListTemplates(ctx context.Context, p store.Page) ([]*store.Template, string, error)
	DeleteTemplate(ctx context.Context, name string) error
}

// Bounds of the template build API's state, per tenant.
const (
	maxUploadBytes   = 1 << 30 // one copy step's archive
	maxUploads       = 64      // archives kept per tenant
	maxBuilds        = 32      // builds waiting or in progress per tenant
	maxEndedBuilds   = 64      // ended builds whose status is kept per tenant
	maxLogEntries    = 20000   // log lines kept per build
	uploadLinkTTL    = 15 * time.Minute
	buildMemory      = time.Hour // a finished build's status stays readable this long
	uploadMemory     = 24 * time.Hour
	uploadReadBudget = 30 * time.Minute
	// e2bBaseImage is E2B's default base image (fromBaseImage()): berth's
	// base template is its counterpart (E2B's user, home and tools).
	e2bBaseImage = "e2bdev/base"
	// defaultTag is E2B's tag of a name given without one.
	defaultTag = "default"
	// The labels of a template the door built or tagged: its E2B name,
	// tag and build id.
	labelName  = "sh.berth.e2b.name"
	labelTag   = "sh.berth.e2b.tag"
	labelBuild = "sh.berth.e2b.build-id"
)

// tplState is the door's template builds and uploads.
type tplState struct {
	mu      sync.Mutex
	builds  map[string]*tplBuild   // by build id
	uploads map[string]*tplUpload  // by tenant + "\x00" + hash
	links   map[string]*uploadLink // by one-time token
	ctx     context.Context        // ends at Close: builds in progress stop
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	dir     string // archives, created when first needed
	// recDir keeps a file per build (its buildRecord); "" keeps builds in
	// memory only. saveMu orders the writes of one state after another.
	recDir string
	saveMu sync.Mutex
}

type tplBuild struct {
	id, templateID, tenant string
	// target is the berth template the build makes (templateID's, or
	// templateID.tag); tags are the E2B tags it gets, target's first.
	target         string
	tags           []string
	status         string // waiting, building, ready, error
	reason         *buildReason
	logs           []logEntry
	created, ended time.Time
}

// buildRecord is a build as its file keeps it.
type buildRecord struct {
	ID         string       `json:"id"`
	TemplateID string       `json:"templateID"`
	Tenant     string       `json:"tenant"`
	Target     string       `json:"target"`
	Tags       []string     `json:"tags"`
	Status     string       `json:"status"`
	Reason     *buildReason `json:"reason,omitempty"`
	Logs       []logEntry   `json:"logs"`
	Created    time.Time    `json:"created"`
	Ended      time.Time    `json:"ended,omitzero"`
}

type tplUpload struct {
	file    string
	created time.Time
}

type uploadLink struct {
	p          auth.Principal
	templateID string
	hash       string
	expires    time.Time
}

// newTplState keeps uploads in dir ("" for a temporary directory made
// when first needed) and build records in recDir ("": memory only). dir
// is the door's alone: what a previous run left there (uploads live in
// memory only) is removed. The records in recDir are read back.
func newTplState(dir, recDir string, log *slog.Logger) *tplState {
	if dir != "" {
		_ = os.RemoveAll(dir)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &tplState{builds: map[string]*tplBuild{}, uploads: map[string]*tplUpload{}, links: map[string]*uploadLink{},
		ctx: ctx, cancel: cancel, dir: dir, recDir: recDir}
	if recDir != "" {
		s.loadBuilds(time.Now(), log)
	}
	return s
}

// interruptedReason is the reason of a build a daemon restart ended.
const interruptedReason = "the build was interrupted: berth's daemon stopped while it ran; build the template again"

// loadBuilds reads the build records a previous run left: a build that
// was in progress then ended with it (an error saying so); a record that
// cannot be read is removed.
func (s *tplState) loadBuilds(now time.Time, log *slog.Logger) {
	ents, err := os.ReadDir(s.recDir)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			log.Warn("reading the e2b build records", "dir", s.recDir, "err", err)
		}
		return
	}
	for _, e := range ents {
		file := filepath.Join(s.recDir, e.Name())
		id, ok := strings.CutSuffix(e.Name(), ".json")
		var rec buildRecord
		if ok {
			b, err := os.ReadFile(file)
			ok = err == nil && json.Unmarshal(b, &rec) == nil && rec.ID == id && validBuildID(id) && rec.Tenant != "" &&
				rec.Target != "" && len(rec.Tags) > 0 && slices.Contains([]string{"waiting", "building", "ready", "error"}, rec.Status)
		}
		if !ok {
			log.Warn("removing an unreadable e2b build record", "file", file)
			_ = os.RemoveAll(file)
			continue
		}
		b := &tplBuild{id: rec.ID, templateID: rec.TemplateID, tenant: rec.Tenant, target: rec.Target, tags: rec.Tags,
			status: rec.Status, reason: rec.Reason, logs: rec.Logs, created: rec.Created, ended: rec.Ended}
		if b.status == "building" {
			b.status, b.ended = "error", now
			b.reason = &buildReason{Message: interruptedReason, LogEntries: []logEntry{}}
			b.logs = append(b.logs, logEntry{Timestamp: now.UTC(), Level: "error", Message: interruptedReason})
			s.builds[b.id] = b
			s.save(b)
			continue
		}
		s.builds[b.id] = b
	}
}

// validBuildID is a build id as newBuildID makes them.
func validBuildID(id string) bool {
	if len(id) != 36 {
		return false
	}
	for i := range len(id) {
		c := id[i]
		if i == 8 || i == 13 || i == 18 || i == 23 {
			if c != '-' {
				return false
			}
		} else if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// save writes b's record (when the door keeps records). Called without
// mu held; a record that cannot be written leaves the build in memory.
func (s *tplState) save(b *tplBuild) {
	if s.recDir == "" {
		return
	}
	s.saveMu.Lock()
	defer s.saveMu.Unlock()
	s.mu.Lock()
	rec := buildRecord{ID: b.id, TemplateID: b.templateID, Tenant: b.tenant, Target: b.target, Tags: b.tags,
		Status: b.status, Reason: b.reason, Logs: slices.Clone(b.logs), Created: b.created, Ended: b.ended}
	gone := s.builds[b.id] != b
	s.mu.Unlock()
	file := filepath.Join(s.recDir, b.id+".json")
	if gone { // forgotten meanwhile
		_ = os.Remove(file)
		return
	}
	data, err := json.Marshal(rec)
	if err == nil {
		err = os.MkdirAll(s.recDir, 0o700)
	}
	if err == nil {
		err = writeFileAtomic(file, data)
	}
	if err != nil {
		slog.Default().Warn("writing an e2b build record", "build", b.id, "err", err)
	}
}

// forget removes the record of a build no longer kept. Called with mu
// held.
func (s *tplState) forget(id string) {
	delete(s.builds, id)
	if s.recDir != "" {
		_ = os.Remove(filepath.Join(s.recDir, id+".json"))
	}
}

func writeFileAtomic(file string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(file), ".rec-*")
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), file)
	}
	if err != nil {
		_ = os.Remove(f.Name())
	}
	return err
}

// close stops the builds in progress, waits for them and removes the
// archives.
func (s *tplState) close() {
	s.cancel()
	s.wg.Wait()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dir != "" {
		_ = os.RemoveAll(s.dir)
	}
}

// sweep forgets old builds, links and uploads. Called with mu held.
func (s *tplState) sweep(now time.Time) {
	for id, b := range s.builds {
		if !b.ended.IsZero() && now.Sub(b.ended) > buildMemory || b.status == "waiting" && now.Sub(b.created) > buildMemory {
			s.forget(id)
		}
	}
	for t, l := range s.links {
		if now.After(l.expires) {
			delete(s.links, t)
		}
	}
	for k, u := range s.uploads {
		if now.Sub(u.created) > uploadMemory {
			_ = os.Remove(u.file)
			delete(s.uploads, k)
		}
	}
}

type logEntry struct {
	Timestamp time.Time `json:"timestamp"`
	Level     string    `json:"level"`
	Message   string    `json:"message"`
	Step      string    `json:"step,omitempty"`
}

type buildReason struct {
	Message    string     `json:"message"`
	Step       string     `json:"step,omitempty"`
	LogEntries []logEntry `json:"logEntries"`
}

type templateRequestV3 struct {
	Name     string   `json:"name"`
	Alias    string   `json:"alias"`
	Tags     []string `json:"tags"`
	CPUCount *int     `json:"cpuCount"`
	MemoryMB *int     `json:"memoryMB"`
}

type templateRequestOut struct {
	TemplateID string   `json:"templateID"`
	BuildID    string   `json:"buildID"`
	Public     bool     `json:"public"`
	Aliases    []string `json:"aliases"`
	Names      []string `json:"names"`
	Tags       []string `json:"tags"`
}

type templateStep struct {
	Type      string   `json:"type"`
	Args      []string `json:"args"`
	FilesHash string   `json:"filesHash"`
	Force     bool     `json:"force"`
}

type buildStart struct {
	FromImage         string         `json:"fromImage"`
	FromTemplate      string         `json:"fromTemplate"`
	FromImageRegistry map[string]any `json:"fromImageRegistry"`
	Force             bool           `json:"force"`
	Steps             []templateStep `json:"steps"`
	StartCmd          string         `json:"startCmd"`
	ReadyCmd          string         `json:"readyCmd"`
}

type buildInfoOut struct {
	Logs       []string     `json:"logs"`
	LogEntries []logEntry   `json:"logEntries"`
	TemplateID string       `json:"templateID"`
	BuildID    string       `json:"buildID"`
	Status     string       `json:"status"`
	Reason     *buildReason `json:"reason,omitempty"`
}

func newBuildID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	h := hex.EncodeToString(b)
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// berthName is the berth template of E2B's name and tag: the name itself
// for E2B's default tag (or none), else name.tag. E2B's names hold no '.',
// so a tagged one's must not: name.tag then names one name and tag only.
func berthName(name, tag string) (string, error) {
	if !sandbox.ValidName(name) {
		return "", errdefs.Invalid("bad template name %q: use 1-63 letters, digits, '.', '_' or '-'", name)
	}
	if tag == "" || tag == defaultTag {
		return name, nil
	}
	if !sandbox.ValidName(tag) {
		return "", errdefs.Invalid("bad tag %q: use letters, digits, '.', '_' or '-', starting with a letter or digit", tag)
	}
	if strings.Contains(name, ".") {
		return "", errdefs.Invalid("template name %q: a tagged template's name holds no '.' (berth names the template of a tag name.tag)", name)
	}
	n := name + "." + tag
	if !sandbox.ValidName(n) {
		return "", errdefs.Invalid("template %s:%s: name and tag together take at most 62 characters on berth", name, tag)
	}
	return n, nil
}

// splitRef is E2B's name[:tag]: the name and its tag ("" for none).
func splitRef(ref string) (name, tag string, err error) {
	name, tag, has := strings.Cut(ref, ":")
	if has && tag == "" {
		return "", "", errdefs.Invalid("template %q: a tag after ':' is required", ref)
	}
	return name, tag, nil
}

// refName is the berth template E2B's name[:tag] names.
func refName(ref string) (string, error) {
	name, tag, err := splitRef(ref)
	if err != nil {
		return "", err
	}
	return berthName(name, tag)
}

// buildTags are the E2B name and tags a build request names: the name's
// own tag and the request's tags, E2B's default tag when none is given.
func buildTags(ref string, more []string) (name string, tags []string, err error) {
	name, tag, err := splitRef(ref)
	if err != nil {
		return "", nil, err
	}
	if tag != "" {
		tags = append(tags, tag)
	}
	for _, t := range more {
		if !slices.Contains(tags, t) {
			tags = append(tags, t)
		}
	}
	if len(tags) == 0 {
		tags = []string{defaultTag}
	}
	if len(tags) > 16 {
		return "", nil, errdefs.Invalid("tags: at most 16")
	}
	for _, t := range tags {
		if _, err := berthName(name, t); err != nil {
			return "", nil, err
		}
	}
	return name, tags, nil
}

// tagLabels is the LABEL instruction marking a template as E2B's name:tag
// of a build.
func tagLabels(name, tag, buildID string) string {
	return fmt.Sprintf("LABEL %s=%s %s=%s %s=%s", labelName, dq(name), labelTag, dq(tag), labelBuild, dq(buildID))
}

// requestBuild is POST /v3/templates: a build of a new template (or of a
// new tag of one), waiting for its steps.
func (d *Door) requestBuild(ctx context.Context, w http.ResponseWriter, r *http.Request, p auth.Principal) error {
	var in templateRequestV3
	if err := decode(r, &in); err != nil {
		return err
	}
	if in.Name == "" {
		in.Name = in.Alias
	}
	if in.Name == "" {
		return errdefs.Invalid("name: required")
	}
	name, tags, err := buildTags(in.Name, in.Tags)
	if err != nil {
		return err
	}
	for _, tag := range tags {
		bn, _ := berthName(name, tag)
		if t, err := d.cfg.Templates.ResolveTemplate(ctx, p.Tenant, bn); err == nil && t.Tenant == p.Tenant {
			return errdefs.Conflict("template %q exists: berth builds a name:tag once (remove the tag with Template.removeTags or the template with `berth template rm %s`)", bn, bn)
		} else if err != nil && !errors.Is(err, errdefs.ErrNotFound) {
			return err
		}
	}
	target, _ := berthName(name, tags[0])
	s := d.tpl
	now := time.Now()
	s.mu.Lock()
	s.sweep(now)
	n := 0
	var oldest *tplBuild
	ended := 0
	for _, b := range s.builds {
		switch {
		case b.tenant != p.Tenant:
		case b.ended.IsZero():
			n++
		default:
			ended++
			if oldest == nil || b.ended.Before(oldest.ended) {
				oldest = b
			}
		}
	}
	if n >= maxBuilds {
		s.mu.Unlock()
		return errdefs.LimitBusy("e2b_template_builds", maxBuilds, time.Minute, "%d template builds of this tenant are waiting or in progress: wait for them", n)
	}
	if ended >= maxEndedBuilds { // the oldest ended build's status goes first
		s.forget(oldest.id)
	}
	b := &tplBuild{id: newBuildID(), templateID: name, target: target, tags: tags, tenant: p.Tenant, status: "waiting", created: now}
	s.builds[b.id] = b
	s.mu.Unlock()
	s.save(b)
	writeJSON(w, http.StatusAccepted, templateRequestOut{TemplateID: name, BuildID: b.id, Aliases: []string{name},
		Names: []string{name}, Tags: tags})
	return nil
}

// ownBuild is the caller's build of templateID, else 404.
func (s *tplState) ownBuild(p auth.Principal, templateID, buildID string) (*tplBuild, error) {
	b := s.builds[buildID]
	if b == nil || b.tenant != p.Tenant || b.templateID != templateID {
		return nil, errdefs.NotFound("template build %q of %q not found", buildID, templateID)
	}
	return b, nil
}

// validHash is a copy step's files hash as the SDK computes it (SHA-256,
// hex).
func validHash(h string) bool {
	if len(h) != 64 {
		return false
	}
	_, err := hex.DecodeString(h)
	return err == nil && strings.ToLower(h) == h
}

// fileLink is GET /templates/{templateID}/files/{hash}: present when the
// tenant has uploaded those files, else a one-time URL to upload them to.
func (d *Door) fileLink(_ context.Context, w http.ResponseWriter, r *http.Request, p auth.Principal) error {
	tid, hash := r.PathValue("templateID"), r.PathValue("hash")
	if !validHash(hash) {
		return errdefs.Invalid("bad files hash %q: want 64 lower-case hex digits", hash)
	}
	s := d.tpl
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sweep(now)
	found := false
	for _, b := range s.builds {
		found = found || b.tenant == p.Tenant && b.templateID == tid && b.status == "waiting"
	}
	if !found {
		return errdefs.NotFound("no template build of %q waiting for its files", tid)
	}
	if _, ok := s.uploads[p.Tenant+"\x00"+hash]; ok {
		writeJSON(w, http.StatusOK, map[string]any{"present": true})
		return nil
	}
	tok := make([]byte, 32)
	_, _ = rand.Read(tok)
	t := hex.EncodeToString(tok)
	s.links[t] = &uploadLink{p: p, templateID: tid, hash: hash, expires: now.Add(uploadLinkTTL)}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	writeJSON(w, http.StatusCreated, map[string]any{"present": false, "url": scheme + "://" + r.Host + "/templates/uploads/" + t})
	return nil
}

// uploadFiles is PUT /templates/uploads/{token}: a copy step's files (a tar
// archive, gzipped or not) to the one-time URL fileLink gave. The token is
// the credential: it names the tenant and the key that asked for it, and
// dies with its first use, its expiry or that key's revocation.
func (d *Door) uploadFiles(w http.ResponseWriter, r *http.Request) {
	s := d.tpl
	tok := r.PathValue("token")
	s.mu.Lock()
	l := s.links[tok]
	if l != nil {
		delete(s.links, tok)
	}
	s.mu.Unlock()
	if l == nil || time.Now().After(l.expires) {
		writeError(w, d.cfg.Log, errdefs.Unauthenticated("upload link unknown, used or expired: ask for a new one"))
		return
	}
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Now().Add(uploadReadBudget))
	ctx := d.cfg.WithCaller(r.Context(), l.p)
	err := d.audited(ctx, r.RemoteAddr, l.p, access.E2BTemplateUpload, l.templateID+"/"+l.hash, nil, func() error {
		return s.store(r, l)
	})
	if err != nil {
		writeError(w, d.cfg.Log, err)
		return
	}
	w.WriteHeader(http.StatusOK)
}

// store writes an upload's body to the tenant's archives.
func (s *tplState) store(r *http.Request, l *uploadLink) error {
	if r.ContentLength > maxUploadBytes {
		return errdefs.TooLarge("files archive over %d bytes", maxUploadBytes)
	}
	s.mu.Lock()
	if s.dir == "" {
		dir, err := os.MkdirTemp("", "berth-e2b-files-")
		if err != nil {
			s.mu.Unlock()
			return err
		}
		s.dir = dir
	}
	dir := s.dir
	if err := os.MkdirAll(dir, 0o700); err != nil {
		s.mu.Unlock()
		return err
	}
	n := 0
	for k := range s.uploads {
		if strings.HasPrefix(k, l.p.Tenant+"\x00") {
			n++
		}
	}
	s.mu.Unlock()
	if n >= maxUploads {
		return errdefs.LimitBusy("e2b_template_files", maxUploads, time.Hour, "%d file archives of this tenant are kept: build with them or wait a day", n)
	}
	f, err := os.CreateTemp(dir, "up-*")
	if err != nil {
		return err
	}
	k, err := io.Copy(f, io.LimitReader(r.Body, maxUploadBytes+1))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil && k > maxUploadBytes {
		err = errdefs.TooLarge("files archive over %d bytes", maxUploadBytes)
	}
	if err == nil {
		err = checkArchive(f.Name())
	}
	if err != nil {
		_ = os.Remove(f.Name())
		if _, st := errdefs.Code(err); st == 0 {
			err = errdefs.Invalid("reading the files archive: %v", err)
		}
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	key := l.p.Tenant + "\x00" + l.hash
	if old := s.uploads[key]; old != nil {
		_ = os.Remove(old.file)
	}
	s.uploads[key] = &tplUpload{file: f.Name(), created: time.Now()}
	return nil
}

// openArchive reads an upload: a tar archive, gzipped or not.
func openArchive(file string) (*tar.Reader, io.Closer, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, nil, err
	}
	br := bufio.NewReader(f)
	var rd io.Reader = br
	if head, _ := br.Peek(2); len(head) == 2 && head[0] == 0x1f && head[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			f.Close()
			return nil, nil, errdefs.Invalid("files archive: %v", err)
		}
		rd = zr
	}
	return tar.NewReader(rd), f, nil
}

// archiveName is an upload entry's name made safe: relative, clean, inside
// the archive.
func archiveName(n string) (string, bool) {
	c := path.Clean(strings.TrimPrefix(n, "./"))
	if c == "." || c == ".." || strings.HasPrefix(c, "../") || path.IsAbs(c) || strings.ContainsRune(c, 0) {
		return "", false
	}
	return c, true
}

// checkArchive reads an upload through once: a tar archive whose names
// stay inside it.
func checkArchive(file string) error {
	tr, c, err := openArchive(file)
	if err != nil {
		return err
	}
	defer c.Close()
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return errdefs.Invalid("files archive: %v", err)
		}
		if _, ok := archiveName(h.Name); !ok {
			return errdefs.Invalid("files archive: entry %q leaves the archive", h.Name)
		}
		if _, err := io.Copy(io.Discard, tr); err != nil {
			return errdefs.Invalid("files archive: %v", err)
		}
	}
}

// plan is a build's Dockerfile and what it needs: the uploads its COPY
// steps read, the E2B step of each Dockerfile instruction after FROM
// (1-based, for the failing step of an error), and the service.
type plan struct {
	dockerfile string
	hashes     []string
	stepOf     []int
	service    *templates.ServiceRequest
	// what[k-1] says what E2B step k does, for its error.
	what []string
}

// dq is s as one double-quoted Dockerfile word, $ not expanded.
func dq(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`, `$`, `\$`)
	return `"` + r.Replace(s) + `"`
}

func jsonWords(ws ...string) string {
	var b strings.Builder
	b.WriteByte('[')
	for i, w := range ws {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Quote(w))
	}
	b.WriteByte(']')
	return b.String()
}

// Quote-safe as JSON: strconv.Quote escapes what JSON would, but writes
// \x and \U forms JSON lacks for some bytes; such text is refused first.
func plainText(field, s string) error {
	for _, r := range s {
		if r < 0x20 && r != '\t' && r != '\n' || r == 0x7f || r == 0xfffd {
			return errdefs.Invalid("%s: control characters or invalid UTF-8 are not allowed", field)
		}
	}
	return nil
}

func oneLine(field, s string) error {
	if err := plainText(field, s); err != nil {
		return err
	}
	if strings.ContainsAny(s, "\n\t") {
		return errdefs.Invalid("%s: must be one line", field)
	}
	return nil
}

func validEnvName(k string) bool {
	if k == "" || len(k) > 256 || k[0] >= '0' && k[0] <= '9' {
		return false
	}
	for i := range len(k) {
		c := k[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

// readyPort is the port of the SDK's waitForPort check; sleep is its
// waitForTimeout.
func readyCheck(cmd string) (port int, ok bool) {
	cmd = strings.TrimSpace(cmd)
	if cmd == "" {
		return 0, true
	}
	if n, found := strings.CutPrefix(cmd, "sleep "); found {
		if _, err := strconv.ParseUint(strings.TrimSpace(n), 10, 32); err == nil {
			return 0, true
		}
	}
	if rest, found := strings.CutPrefix(cmd, `[ -n "$(ss -Htuln sport = :`); found {
		if num, found := strings.CutSuffix(rest, `)" ]`); found {
			if p, err := strconv.Atoi(num); err == nil && p > 0 && p < 65536 {
				return p, true
			}
		}
	}
	return 0, false
}

// baseName is what a build's FROM names: its template, or its image,
// E2B's base image being berth's base template.
func baseName(in *buildStart) string {
	if in.FromTemplate != "" {
		return in.FromTemplate
	}
	if r, _, _ := strings.Cut(in.FromImage, ":"); r == e2bBaseImage || r == "docker.io/"+e2bBaseImage {
		return "base"
	}
	return in.FromImage
}

// planBuild writes an E2B build as a Dockerfile; has says whether the
// tenant holds the files of a hash. buildID makes forced steps miss the
// cache.
// base is the config of the base when it is a template (nil for an
// image): its workdir is written out, since berth's Dockerfile builds
// resolve a relative COPY destination against the stage's WORKDIR
// instructions only, and its user is the one a RUN as another user
// returns to.
func planBuild(in *buildStart, buildID string, base *store.TemplateConfig, has func(string) bool) (*plan, error) {
	pl := &plan{}
	var b strings.Builder
	if in.FromImageRegistry != nil {
		return nil, errdefs.Invalid("fromImageRegistry: registry credentials are not taken by berth's template builds: import the image with `berth template import` and build from that template")
	}
	switch {
	case in.FromImage != "" && in.FromTemplate != "":
		return nil, errdefs.Invalid("give one of fromImage and fromTemplate")
	case in.FromTemplate != "":
		if !sandbox.ValidName(in.FromTemplate) {
			return nil, errdefs.Invalid("fromTemplate: bad template name %q", in.FromTemplate)
		}
		fmt.Fprintf(&b, "FROM %s\n", in.FromTemplate)
	case in.FromImage != "":
		img := baseName(in)
		if err := oneLine("fromImage", img); err != nil {
			return nil, err
		}
		if strings.ContainsAny(img, " $\"'\\") {
			return nil, errdefs.Invalid("fromImage: bad image reference %q", img)
		}
		fmt.Fprintf(&b, "FROM %s\n", img)
	default:
		return nil, errdefs.Invalid("give fromImage or fromTemplate")
	}
	if len(in.Steps) > 512 {
		return nil, errdefs.Invalid("steps: at most 512")
	}
	emit := func(step int, format string, args ...any) {
		fmt.Fprintf(&b, format+"\n", args...)
		pl.stepOf = append(pl.stepOf, step)
	}
	user := "" // the USER the steps set, "" for the base's
	if base != nil {
		user = base.User
		if base.Workdir != "" {
			if err := oneLine("the base's workdir", base.Workdir); err != nil {
				return nil, err
			}
			emit(0, "WORKDIR %s", dq(base.Workdir))
		}
	}
	forced := in.Force
	for i, st := range in.Steps {
		n := i + 1
		field := fmt.Sprintf("steps[%d]", i)
		pl.what = append(pl.what, stepWhat(st))
		for _, a := range st.Args {
			if err := plainText(field, a); err != nil {
				return nil, err
			}
		}
		if st.Force && !forced {
			// The label changes every later step's cache key: they are
			// built again, as E2B's forced step and those after it are.
			forced = true
		}
		if forced && (st.Force || n == 1) {
			emit(n, "LABEL %s=%s", "sh.berth.e2b.build", dq(buildID))
		}
		switch strings.ToUpper(st.Type) {
		case "RUN":
			if len(st.Args) < 1 || len(st.Args) > 2 || strings.TrimSpace(st.Args[0]) == "" {
				return nil, errdefs.Invalid("%s: RUN takes a command and an optional user", field)
			}
			as := ""
			if len(st.Args) == 2 {
				as = st.Args[1]
			}
			if as != "" && as != user {
				if err := oneLine(field+" user", as); err != nil {
					return nil, err
				}
				emit(n, "USER %s", dq(as))
			}
			emit(n, "RUN %s", jsonWords("/bin/sh", "-c", st.Args[0]))
			if as != "" && as != user {
				back := user
				if back == "" {
					back = "root"
				}
				emit(n, "USER %s", dq(back))
			}
		case "COPY":
			if len(st.Args) < 2 || len(st.Args) > 4 {
				return nil, errdefs.Invalid("%s: COPY takes a source, a destination, and an optional user and mode", field)
			}
			if !validHash(st.FilesHash) {
				return nil, errdefs.Invalid("%s: COPY needs the filesHash of its uploaded files", field)
			}
			if !has(st.FilesHash) {
				return nil, errdefs.NotFound("%s: the files of hash %s were not uploaded", field, st.FilesHash)
			}
			src, dst := st.Args[0], st.Args[1]
			c, ok := archiveName(src)
			if !ok || strings.ContainsAny(src, "$\n\t") || dst == "" || strings.ContainsAny(dst, "$\n\t") {
				return nil, errdefs.Invalid("%s: bad COPY source %q or destination %q", field, src, dst)
			}
			if strings.ContainsAny(c, "*?[") && !strings.HasSuffix(dst, "/") {
				dst += "/" // many files: a directory, as E2B copies them
			}
			flags := ""
			if len(st.Args) > 2 && st.Args[2] != "" {
				if strings.ContainsAny(st.Args[2], " $\"'\\\n\t") {
					return nil, errdefs.Invalid("%s: bad COPY user %q", field, st.Args[2])
				}
				flags += "--chown=" + st.Args[2] + " "
			}
			if len(st.Args) > 3 && st.Args[3] != "" {
				if _, err := strconv.ParseUint(st.Args[3], 8, 32); err != nil || len(st.Args[3]) > 4 {
					return nil, errdefs.Invalid("%s: bad COPY mode %q: want octal such as 0755", field, st.Args[3])
				}
				flags += "--chmod=" + st.Args[3] + " "
			}
			pl.hashes = append(pl.hashes, st.FilesHash)
			emit(n, "COPY %s%s", flags, jsonWords("files/"+st.FilesHash+"/"+c, dst))
		case "ENV":
			if len(st.Args) == 0 || len(st.Args)%2 != 0 {
				return nil, errdefs.Invalid("%s: ENV takes name and value pairs", field)
			}
			var kv []string
			for j := 0; j < len(st.Args); j += 2 {
				if !validEnvName(st.Args[j]) {
					return nil, errdefs.Invalid("%s: bad environment variable name %q", field, st.Args[j])
				}
				if err := oneLine(field+" "+st.Args[j], st.Args[j+1]); err != nil {
					return nil, err
				}
				kv = append(kv, st.Args[j]+"="+dq(st.Args[j+1]))
			}
			emit(n, "ENV %s", strings.Join(kv, " "))
		case "WORKDIR":
			if len(st.Args) != 1 || st.Args[0] == "" {
				return nil, errdefs.Invalid("%s: WORKDIR takes a path", field)
			}
			if err := oneLine(field, st.Args[0]); err != nil {
				return nil, err
			}
			emit(n, "WORKDIR %s", dq(st.Args[0]))
		case "USER":
			if len(st.Args) != 1 || st.Args[0] == "" {
				return nil, errdefs.Invalid("%s: USER takes a user", field)
			}
			if err := oneLine(field, st.Args[0]); err != nil {
				return nil, err
			}
			user = st.Args[0]
			emit(n, "USER %s", dq(user))
		default:
			return nil, errdefs.Invalid("%s: step type %q is not supported by berth (RUN, COPY, ENV, WORKDIR and USER are)", field, st.Type)
		}
	}
	if in.StartCmd != "" {
		if err := plainText("startCmd", in.StartCmd); err != nil {
			return nil, err
		}
		port, ok := readyCheck(in.ReadyCmd)
		if !ok {
			return nil, errdefs.Invalid("readyCmd %q: berth waits for a port (waitForPort) or a time (waitForTimeout) only", in.ReadyCmd)
		}
		pl.service = &templates.ServiceRequest{Cmd: []string{"/bin/sh", "-c", in.StartCmd}, Restart: store.RestartNever, ReadyPort: port}
	} else if in.ReadyCmd != "" {
		if _, ok := readyCheck(in.ReadyCmd); !ok {
			return nil, errdefs.Invalid("readyCmd %q: berth waits for a port (waitForPort) or a time (waitForTimeout) only", in.ReadyCmd)
		}
	}
	pl.dockerfile = b.String()
	return pl, nil
}

// writeContext writes the build context: the Dockerfile, and each upload
// pl reads under files/{hash}/.
func writeContext(w io.Writer, pl *plan, fileOf func(string) string) error {
	tw := tar.NewWriter(w)
	df := []byte(pl.dockerfile)
	if err := tw.WriteHeader(&tar.Header{Name: "Dockerfile", Mode: 0o644, Size: int64(len(df)), Typeflag: tar.TypeReg}); err != nil {
		return err
	}
	if _, err := tw.Write(df); err != nil {
		return err
	}
	done := map[string]bool{}
	for _, h := range pl.hashes {
		if done[h] {
			continue
		}
		done[h] = true
		if err := copyArchive(tw, fileOf(h), "files/"+h+"/"); err != nil {
			return err
		}
	}
	return tw.Close()
}

func copyArchive(tw *tar.Writer, file, prefix string) error {
	tr, c, err := openArchive(file)
	if err != nil {
		return err
	}
	defer c.Close()
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		name, ok := archiveName(h.Name)
		if !ok {
			return errdefs.Invalid("files archive: entry %q leaves the archive", h.Name)
		}
		h.Name = prefix + name
		if h.Typeflag == tar.TypeDir {
			h.Name += "/"
		}
		if h.Typeflag == tar.TypeLink {
			ln, ok := archiveName(h.Linkname)
			if !ok {
				return errdefs.Invalid("files archive: link %q leaves the archive", h.Linkname)
			}
			h.Linkname = prefix + ln
		}
		h.Format = tar.FormatPAX
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if _, err := io.Copy(tw, tr); err != nil {
			return err
		}
	}
}

// startBuild is POST /v2/templates/{templateID}/builds/{buildID}: the
// build's steps, built in the background.
func (d *Door) startBuild(ctx context.Context, w http.ResponseWriter, r *http.Request, p auth.Principal) error {
	var in buildStart
	if err := decode(r, &in); err != nil {
		return err
	}
	tid, bid := r.PathValue("templateID"), r.PathValue("buildID")
	if in.FromTemplate != "" && strings.Contains(in.FromTemplate, ":") {
		n, err := refName(in.FromTemplate) // E2B's name:tag
		if err != nil {
			return errdefs.Invalid("fromTemplate: %v", err)
		}
		in.FromTemplate = n
	}
	var base *store.TemplateConfig
	var missing error // a fromTemplate that names nothing: the build fails at its base, as E2B's
	if n := baseName(&in); sandbox.ValidName(n) {
		t, err := d.cfg.Templates.ResolveTemplate(ctx, p.Tenant, n)
		switch {
		case err == nil:
			base = &t.Config
		case !errors.Is(err, errdefs.ErrNotFound):
			return err
		case in.FromTemplate != "":
			missing = err
		}
	}
	s := d.tpl
	s.mu.Lock()
	b, err := s.ownBuild(p, tid, bid)
	if err == nil && b.status != "waiting" {
		err = errdefs.Conflict("template build %q was started already", bid)
	}
	files := map[string]string{}
	var pl *plan
	if err == nil {
		pl, err = planBuild(&in, bid, base, func(h string) bool {
			u := s.uploads[p.Tenant+"\x00"+h]
			if u != nil {
				files[h] = u.file
			}
			return u != nil
		})
	}
	if err == nil {
		b.status = "building"
		// The result says which E2B name, tag and build it is.
		pl.dockerfile += tagLabels(b.templateID, b.tags[0], b.id) + "\n"
		pl.stepOf = append(pl.stepOf, 0)
	}
	s.mu.Unlock()
	if err != nil {
		return err
	}
	s.save(b)
	if missing != nil {
		d.endBuild(b, nil, missing, 0, pl)
		writeJSON(w, http.StatusAccepted, struct{}{})
		return nil
	}
	// The files are linked aside: a later upload of the same hash or the
	// sweep does not pull them from under the build.
	held := map[string]string{}
	for h, f := range files {
		dst := f + ".build-" + bid
		if err := os.Link(f, dst); err != nil {
			for _, x := range held {
				_ = os.Remove(x)
			}
			d.endBuild(b, nil, err, 0, pl)
			return err
		}
		held[h] = dst
	}
	bctx := d.cfg.WithCaller(s.ctx, p)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer func() {
			for _, f := range held {
				_ = os.Remove(f)
			}
		}()
		d.runBuild(bctx, b, pl, held, p)
	}()
	writeJSON(w, http.StatusAccepted, struct{}{})
	return nil
}

// runBuild builds b and keeps its log.
func (d *Door) runBuild(ctx context.Context, b *tplBuild, pl *plan, files map[string]string, p auth.Principal) {
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(writeContext(pw, pl, func(h string) string { return files[h] })) }()
	defer pr.Close()
	lines := map[string]*bytes.Buffer{}
	last := 0
	flush := func(stream string, all bool) {
		buf := lines[stream]
		if buf == nil {
			return
		}
		for {
			i := bytes.IndexByte(buf.Bytes(), '\n')
			if i < 0 && !(all && buf.Len() > 0) && buf.Len() < 64<<10 {
				return
			}
			var line []byte
			if i < 0 {
				line = bytes.Clone(buf.Bytes())
				buf.Reset()
			} else {
				line = bytes.Clone(buf.Next(i + 1))
			}
			d.logBuild(b, "info", strings.TrimRight(string(line), "\r\n"), stepName(last, pl))
			if buf.Len() == 0 {
				return
			}
		}
	}
	req := &templates.DockerfileRequest{Name: b.target, Context: pr, Service: pl.service}
	t, err := d.cfg.Templates.BuildDockerfile(ctx, req, p.Actor, func(ev templates.Event) {
		if ev.Step != last {
			flush("stdout", true)
			flush("stderr", true)
			if ev.Step != 0 {
				last = ev.Step
				d.tpl.save(b) // the log so far outlives a restart
			}
		}
		if lines[ev.Stream] == nil {
			lines[ev.Stream] = &bytes.Buffer{}
		}
		lines[ev.Stream].Write(ev.Data)
		flush(ev.Stream, false)
	})
	flush("stdout", true)
	flush("stderr", true)
	if err == nil && len(b.tags) > 1 { // the build's other tags
		_, err = d.tagTemplate(ctx, p, t, b.templateID, b.tags[1:], b.id)
		last = 0
	}
	d.endBuild(b, t, err, last, pl)
}

// stepWhat is how an error names step st, as E2B's do.
func stepWhat(st templateStep) string {
	arg := ""
	if len(st.Args) > 0 {
		arg = st.Args[0]
	}
	switch strings.ToUpper(st.Type) {
	case "RUN":
		return fmt.Sprintf("failed to run command '%s'", arg)
	case "COPY":
		return fmt.Sprintf("failed to copy '%s'", arg)
	}
	return fmt.Sprintf("failed to apply %s %s", strings.ToUpper(st.Type), strings.Join(st.Args, " "))
}

// dockerfileLine is the line an error of the Dockerfile's names, and the
// rest of its message: "Dockerfile: line N (text): msg" or
// "Dockerfile: line N: msg".
func dockerfileLine(msg string) (int, string, bool) {
	rest, ok := strings.CutPrefix(msg, "Dockerfile: line ")
	if !ok {
		return 0, msg, false
	}
	i := strings.IndexAny(rest, " :")
	if i <= 0 {
		return 0, msg, false
	}
	n, err := strconv.Atoi(rest[:i])
	if err != nil {
		return 0, msg, false
	}
	rest = rest[i:]
	if strings.HasPrefix(rest, " (") {
		j := strings.Index(rest, "): ")
		if j < 0 {
			return 0, msg, false
		}
		return n, rest[j+3:], true
	}
	return n, strings.TrimPrefix(rest, ": "), true
}

// stepError is err of Dockerfile step n told as E2B tells a step's: what
// the step did, then berth's cause without the Dockerfile's line.
func stepError(n int, pl *plan, msg string) string {
	// The line names the step surely: one instruction a line, FROM first.
	if line, rest, ok := dockerfileLine(msg); ok {
		msg = rest
		if line >= 1 {
			n = line - 1
		}
	}
	// envd's words for a user that does not exist, which programs match.
	if u, ok := strings.CutPrefix(msg, "no such user "); ok {
		if q, err := strconv.Unquote(u); err == nil {
			msg = "command failed: unauthenticated: invalid username: '" + q + "'"
		}
	}
	if pl != nil && n > 0 && n <= len(pl.stepOf) && pl.stepOf[n-1] > 0 && pl.stepOf[n-1] <= len(pl.what) {
		return pl.what[pl.stepOf[n-1]-1] + ": " + msg
	}
	return msg
}

// stepName is E2B's name of the step that made Dockerfile step n: its
// 1-based index among the template's steps, or base.
func stepName(n int, pl *plan) string {
	if n <= 0 || pl == nil || n > len(pl.stepOf) || pl.stepOf[n-1] == 0 {
		return "base"
	}
	return strconv.Itoa(pl.stepOf[n-1])
}

func (d *Door) logBuild(b *tplBuild, level, msg, step string) {
	s := d.tpl
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(b.logs) >= maxLogEntries {
		return
	}
	if len(b.logs) == maxLogEntries-1 {
		level, msg = "warn", fmt.Sprintf("(the log is cut at %d lines)", maxLogEntries)
	}
	b.logs = append(b.logs, logEntry{Timestamp: time.Now().UTC(), Level: level, Message: msg, Step: step})
}

// endBuild records b's outcome.
func (d *Door) endBuild(b *tplBuild, t *store.Template, err error, last int, pl *plan) {
	if err != nil {
		msg := err.Error()
		if statusOf(err) >= 500 && !errors.Is(err, errdefs.ErrUnavailable) {
			d.cfg.Log.Error("e2b template build failed", "build", b.id, "template", b.templateID, "err", err)
			msg = "internal error (template build " + b.id + ")"
		}
		if line, _, ok := dockerfileLine(msg); ok && line >= 1 {
			last = line - 1
		}
		step := stepName(last, pl)
		msg = stepError(last, pl, msg)
		d.logBuild(b, "error", msg, step)
		s := d.tpl
		s.mu.Lock()
		b.status, b.ended = "error", time.Now()
		b.reason = &buildReason{Message: msg, Step: step, LogEntries: []logEntry{}}
		s.mu.Unlock()
		s.save(b)
		return
	}
	d.logBuild(b, "info", fmt.Sprintf("Template %s built: %d layers", t.Name, len(t.Layers)), "finalize")
	s := d.tpl
	s.mu.Lock()
	b.status, b.ended = "ready", time.Now()
	s.mu.Unlock()
	s.save(b)
}

// buildStatus is GET /templates/{templateID}/builds/{buildID}/status: the
// build's state and its log from logsOffset.
func (d *Door) buildStatus(_ context.Context, w http.ResponseWriter, r *http.Request, p auth.Principal) error {
	off := 0
	if v := r.URL.Query().Get("logsOffset"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return errdefs.Invalid("logsOffset: want a number from 0")
		}
		off = n
	}
	limit := -1
	if v := r.URL.Query().Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return errdefs.Invalid("limit: want a number from 0")
		}
		limit = n
	}
	s := d.tpl
	s.mu.Lock()
	b, err := s.ownBuild(p, r.PathValue("templateID"), r.PathValue("buildID"))
	if err != nil {
		s.mu.Unlock()
		return err
	}
	out := buildInfoOut{TemplateID: b.templateID, BuildID: b.id, Status: b.status, Logs: []string{}, LogEntries: []logEntry{}}
	if off < len(b.logs) {
		es := b.logs[off:]
		if limit >= 0 && limit < len(es) {
			es = es[:limit]
		}
		out.LogEntries = append(out.LogEntries, es...)
	}
	for _, e := range out.LogEntries {
		out.Logs = append(out.Logs, e.Message+"\n")
	}
	if b.reason != nil {
		rr := *b.reason
		out.Reason = &rr
	}
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, out)
	return nil
}

// templateAlias is GET /templates/aliases/{alias}: whether the caller sees
// a template of that name (the SDK's Template.exists), name:tag naming a
// tag's template, and a name alone any of its tags' too. Another tenant's
// is not found, as one that does not exist.
func (d *Door) templateAlias(ctx context.Context, w http.ResponseWriter, r *http.Request, p auth.Principal) error {
	alias := r.PathValue("alias")
	name, err := refName(alias)
	if err != nil {
		return errdefs.NotFound("template %q not found", alias)
	}
	t, err := d.cfg.Templates.ResolveTemplate(ctx, p.Tenant, name)
	if errors.Is(err, errdefs.ErrNotFound) && !strings.Contains(alias, ":") {
		var tagged []*store.Template
		if tagged, err = d.taggedTemplates(ctx, p, alias); err == nil && len(tagged) == 0 {
			err = errdefs.NotFound("template %q not found", alias)
		}
		if err == nil {
			t = tagged[0]
		}
	}
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"templateID": name, "public": t.Tenant != p.Tenant})
	return nil
}

// taggedTemplates are the caller's own templates the door made for E2B's
// name, oldest first.
func (d *Door) taggedTemplates(ctx context.Context, p auth.Principal, name string) ([]*store.Template, error) {
	var out []*store.Template
	page := store.Page{Limit: 500}
	for {
		ts, next, err := d.cfg.Templates.ListTemplates(ctx, page)
		if err != nil {
			return nil, err
		}
		for _, t := range ts {
			if t.Tenant == p.Tenant && t.Config.Labels[labelName] == name && t.Config.Labels[labelTag] != "" {
				out = append(out, t)
			}
		}
		if next == "" {
			break
		}
		page.Cursor = next
	}
	slices.SortStableFunc(out, func(a, b *store.Template) int { return a.CreatedAt.Compare(b.CreatedAt) })
	return out, nil
}

// ownTag is the caller's template the door made for name:tag, else 404.
func (d *Door) ownTag(ctx context.Context, p auth.Principal, name, tag string) (*store.Template, error) {
	bn, err := berthName(name, tag)
	if err != nil {
		return nil, err
	}
	t, err := d.cfg.Templates.ResolveTemplate(ctx, p.Tenant, bn)
	if err != nil {
		return nil, err
	}
	if t.Tenant != p.Tenant || t.Config.Labels[labelName] != name || t.Config.Labels[labelTag] != tag && !(tag == "" && t.Config.Labels[labelTag] == defaultTag) {
		return nil, errdefs.NotFound("template %s:%s not found", name, tag)
	}
	return t, nil
}

// tagTemplate gives template t (the caller's) E2B's tags of name: each
// a template of t's layers and config, labelled with its tag and t's
// build (buildID when t has none). A tag the door gave before moves to t
// (its template removed first: refused while a sandbox uses it); a
// template of that name the door did not make is left alone (409).
func (d *Door) tagTemplate(ctx context.Context, p auth.Principal, t *store.Template, name string, tags []string, buildID string) (string, error) {
	if b := t.Config.Labels[labelBuild]; b != "" {
		buildID = b
	}
	for _, tag := range tags {
		bn, err := berthName(name, tag)
		if err != nil {
			return "", err
		}
		if bn == t.Name {
			continue
		}
		old, err := d.cfg.Templates.ResolveTemplate(ctx, p.Tenant, bn)
		switch {
		case err == nil && old.Tenant == p.Tenant:
			if old.Config.Labels[labelName] != name {
				return "", errdefs.Conflict("template %q exists and is not E2B's %s:%s: berth leaves it alone", bn, name, tag)
			}
			if err := d.cfg.Templates.DeleteTemplate(ctx, bn); err != nil {
				return "", err
			}
		case err != nil && !errors.Is(err, errdefs.ErrNotFound):
			return "", err
		}
		df := fmt.Sprintf("FROM %s\n%s\n", t.Name, tagLabels(name, tag, buildID))
		pr, pw := io.Pipe()
		go func() { pw.CloseWithError(writeContext(pw, &plan{dockerfile: df}, nil)) }()
		_, err = d.cfg.Templates.BuildDockerfile(ctx, &templates.DockerfileRequest{Name: bn, Context: pr}, p.Actor, func(templates.Event) {})
		pr.Close()
		if err != nil {
			return "", err
		}
	}
	return buildID, nil
}

type assignTagsIn struct {
	Target string   `json:"target"`
	Tags   []string `json:"tags"`
}

// assignTags is POST /templates/tags: E2B's Template.assignTags, the
// build of target (name:tag, the default tag without one) given more
// tags of its name.
func (d *Door) assignTags(ctx context.Context, w http.ResponseWriter, r *http.Request, p auth.Principal) error {
	var in assignTagsIn
	if err := decode(r, &in); err != nil {
		return err
	}
	name, tag, err := splitRef(in.Target)
	if err != nil {
		return err
	}
	if len(in.Tags) == 0 || len(in.Tags) > 16 {
		return errdefs.Invalid("tags: give 1 to 16")
	}
	for _, t := range in.Tags {
		if _, err := berthName(name, t); err != nil {
			return err
		}
	}
	bn, err := berthName(name, tag)
	if err != nil {
		return err
	}
	t, err := d.cfg.Templates.ResolveTemplate(ctx, p.Tenant, bn)
	if err == nil && t.Tenant != p.Tenant {
		err = errdefs.NotFound("template %q not found: tag your own templates", in.Target)
	}
	if err != nil {
		return err
	}
	bid, err := d.tagTemplate(ctx, p, t, name, in.Tags, newBuildID())
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, map[string]any{"buildID": bid, "tags": in.Tags})
	return nil
}

type removeTagsIn struct {
	Name string   `json:"name"`
	Tags []string `json:"tags"`
}

// removeTags is DELETE /templates/tags: E2B's Template.removeTags, each
// tag's template removed (refused while a sandbox uses it). Every tag must
// be one the door gave the name; nothing is removed otherwise.
func (d *Door) removeTags(ctx context.Context, w http.ResponseWriter, r *http.Request, p auth.Principal) error {
	var in removeTagsIn
	if err := decode(r, &in); err != nil {
		return err
	}
	if len(in.Tags) == 0 || len(in.Tags) > 16 {
		return errdefs.Invalid("tags: give 1 to 16")
	}
	var names []string
	for _, tag := range in.Tags {
		t, err := d.ownTag(ctx, p, in.Name, tag)
		if err != nil {
			return err
		}
		names = append(names, t.Name)
	}
	for _, n := range names {
		if err := d.cfg.Templates.DeleteTemplate(ctx, n); err != nil {
			return err
		}
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

type templateTagOut struct {
	Tag       string    `json:"tag"`
	BuildID   string    `json:"buildID"`
	CreatedAt time.Time `json:"createdAt"`
}

// templateSub is GET /templates/{templateID}/{sub}: E2B's tags list
// (sub "tags"; a pattern of its own would clash with
// /templates/aliases/{alias}).
func (d *Door) templateSub(ctx context.Context, w http.ResponseWriter, r *http.Request, p auth.Principal) error {
	if r.PathValue("sub") != "tags" {
		return errdefs.NotFound("berth's E2B door has no route %s %s", r.Method, r.URL.Path)
	}
	name := r.PathValue("templateID")
	ts, err := d.taggedTemplates(ctx, p, name)
	if err != nil {
		return err
	}
	if len(ts) == 0 {
		return errdefs.NotFound("template %q not found", name)
	}
	out := []templateTagOut{}
	for _, t := range ts {
		out = append(out, templateTagOut{Tag: t.Config.Labels[labelTag], BuildID: t.Config.Labels[labelBuild], CreatedAt: t.CreatedAt.UTC()})
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}
