package templates

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/berth-sh/berth/internal/engine"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/store"
)

// The image cache: a create that names a registry image (create --image)
// instead of a template. The reference is resolved at its registry to a
// manifest digest with the caller's registry account (so a caller who may
// not read the image cannot use a cached copy either), and the image is
// kept as a template record of the caller's, named by that digest
// (engine.ImageTemplateName): the next create of the same digest by the
// same owner starts from the record without a pull.
//
// Records are per owner (tenant, or the host): a tenant's pull is charged
// to its storage quota and proves every layer it did not already hold
// with its own bytes (image.Budget), so layers are shared on disk across
// tenants only after their digests were verified from each tenant's own
// download. Concurrent creates of one digest by one owner share a single
// pull (a flight), run under a context no single caller's cancellation
// ends: a caller that gives up leaves the pull to the others, and the
// last one to leave cancels it. Across owners the image store's per-layer
// lock keeps one unpack of a layer at a time.
//
// Under a size cap (Config.ImageCacheSize) the records are collected
// least recently used first once the bytes of the layers they hold pass
// it: a record in use by a sandbox, or held by a create in progress, is
// never removed, and the layer GC keeps every layer any template,
// sandbox or snapshot holds.
type imageCache struct {
	mu      sync.Mutex
	flights map[string]*imageFlight // by cacheKey
	pins    map[string]int          // creates holding a record, by cacheKey
	used    map[string]time.Time    // last use since the daemon started, by cacheKey
	evictMu sync.Mutex              // one eviction at a time
}

// imageFlight is one pull shared by the creates of one owner and digest.
type imageFlight struct {
	done     chan struct{}
	tpl      *store.Template
	err      error
	waiters  int // callers still waiting; the last to leave cancels
	cancel   context.CancelFunc
	finished bool
}

func cacheKey(tenant, name string) string { return tenant + "\x00" + name }

// ResolveImage is the engine's create hook for req.Image (engine.Features):
// the caller's cached record of the image, pulled now if it has none,
// and a release that lets the cache evict it again.
func (m *Builder) ResolveImage(ctx context.Context, req *engine.CreateRequest, tenant string) (*store.Template, func(), error) {
	nop := func() {}
	if tenant != "" && !m.e.Config().TenantPulls {
		return nil, nop, errdefs.Permission("registry pulls by tenants are off on this daemon (serve --tenant-pulls): create from a template you can see")
	}
	if m.e.Images() == nil {
		return nil, nop, errdefs.NotSupported("this daemon keeps no image layers: create from a template")
	}
	rctx := registryCtx(ctx, req.RegistryAuth)
	pinned, digest, err := m.e.Images().Resolve(rctx, req.Image, req.ImageInsecure)
	if err != nil {
		return nil, nop, err
	}
	name := engine.ImageTemplateName(digest)
	key := cacheKey(tenant, name)
	c := &m.images

	c.mu.Lock()
	t, err := m.store.GetTenantTemplate(ctx, tenant, name)
	if err == nil {
		c.pin(key)
		c.mu.Unlock()
		return t, c.releaser(key), nil
	}
	if !errors.Is(err, errdefs.ErrNotFound) {
		c.mu.Unlock()
		return nil, nop, err
	}
	f := c.flights[key]
	if f == nil {
		fctx, cancel := context.WithCancel(context.WithoutCancel(rctx))
		f = &imageFlight{done: make(chan struct{}), cancel: cancel}
		if c.flights == nil {
			c.flights = map[string]*imageFlight{}
		}
		c.flights[key] = f
		c.pin(key) // the flight's own, until its waiters hold theirs
		go m.fly(fctx, f, key, tenant, name, pinned, req)
	}
	f.waiters++
	c.mu.Unlock()

	select {
	case <-f.done:
		if f.err != nil {
			return nil, nop, f.err
		}
		return f.tpl, c.releaser(key), nil // pinned for us by the flight
	case <-ctx.Done():
		c.mu.Lock()
		defer c.mu.Unlock()
		if f.finished {
			if f.err == nil {
				c.unpinLocked(key)
			}
		} else if f.waiters--; f.waiters == 0 {
			f.cancel()
			if c.flights[key] == f {
				delete(c.flights, key) // the next create starts afresh
			}
		}
		return nil, nop, ctx.Err()
	}
}

// fly pulls the image of one flight and records it, then hands the record
// to the waiters still there, each holding a pin on it.
func (m *Builder) fly(ctx context.Context, f *imageFlight, key, tenant, name, pinned string, req *engine.CreateRequest) {
	defer f.cancel()
	go func() {
		select {
		case <-m.e.Stopping():
			f.cancel()
		case <-ctx.Done():
		}
	}()
	tpl, err := m.charged(ctx, func(ctx context.Context) (*store.Template, error) {
		// A flight that just finished may have recorded it.
		if t, err := m.store.GetTenantTemplate(ctx, tenant, name); err == nil {
			return t, nil
		}
		img, err := m.e.Images().Pull(ctx, pinned, req.ImageInsecure)
		if err != nil {
			return nil, err
		}
		return m.putImage(ctx, name, "image:"+req.Image, img, nil)
	})
	c := &m.images
	c.mu.Lock()
	f.tpl, f.err, f.finished = tpl, err, true
	if c.flights[key] == f {
		delete(c.flights, key)
	}
	if err == nil {
		c.pins[key] += f.waiters // each waiter's own, released after its create
		c.touchLocked(key)
	}
	c.unpinLocked(key)
	c.mu.Unlock()
	if err != nil {
		m.log.Warn("image pull on create failed", "image", req.Image, "tenant", tenant, "err", err)
	} else {
		m.log.Info("pulled image on create", "image", req.Image, "record", name, "tenant", tenant, "bytes", tpl.Size)
		// Before the waiters go on, so the cache is within its cap when
		// a create returns; their pins keep this record.
		if err := m.EvictImages(context.WithoutCancel(ctx)); err != nil {
			m.log.Warn("image cache eviction", "err", err)
		}
	}
	close(f.done)
}

func (c *imageCache) pin(key string) {
	if c.pins == nil {
		c.pins = map[string]int{}
	}
	c.pins[key]++
	c.touchLocked(key)
}

func (c *imageCache) unpinLocked(key string) {
	if c.pins[key]--; c.pins[key] <= 0 {
		delete(c.pins, key)
	}
}

func (c *imageCache) touchLocked(key string) {
	if c.used == nil {
		c.used = map[string]time.Time{}
	}
	c.used[key] = time.Now()
}

// releaser returns the release of one pin, safe to call more than once.
func (c *imageCache) releaser(key string) func() {
	var once sync.Once
	return func() {
		once.Do(func() {
			c.mu.Lock()
			c.touchLocked(key)
			c.unpinLocked(key)
			c.mu.Unlock()
		})
	}
}

// imageRecords lists every owner's image cache records: the host's and
// each tenant's own.
func (m *Builder) imageRecords(ctx context.Context) ([]*store.Template, error) {
	var out []*store.Template
	collect := func(list func(store.Page) ([]*store.Template, string, error), owner string) error {
		ts, _, err := list(store.Page{}) // all of them
		if err != nil {
			return err
		}
		for _, t := range ts {
			if t.Tenant == owner && engine.IsImageTemplate(t.Name) {
				out = append(out, t)
			}
		}
		return nil
	}
	if err := collect(func(p store.Page) ([]*store.Template, string, error) { return m.store.ListTemplates(ctx, p) }, ""); err != nil {
		return nil, err
	}
	tenants, err := m.store.ListTenants(ctx)
	if err != nil {
		return nil, err
	}
	for _, tn := range tenants {
		if err := collect(func(p store.Page) ([]*store.Template, string, error) {
			return m.store.ListTenantTemplates(ctx, tn.Name, p)
		}, tn.Name); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// ImageCacheBytes is what the image cache holds: the unpacked bytes of
// the distinct layers of every image record, each counted once however
// many records (and tenants) share it.
func (m *Builder) ImageCacheBytes(ctx context.Context) (int64, error) {
	recs, err := m.imageRecords(ctx)
	if err != nil {
		return 0, err
	}
	return m.layerBytes(recs), nil
}

func (m *Builder) layerBytes(recs []*store.Template) int64 {
	seen := map[string]bool{}
	var n int64
	for _, t := range recs {
		for _, l := range t.Layers {
			if !seen[l] {
				seen[l] = true
				n += max(m.e.Images().Size(l), 0)
			}
		}
	}
	return n
}

// EvictImages removes image records, least recently used first, while
// their layers hold more than the cap (Config.ImageCacheSize; 0: none),
// then the layers nothing holds any more. A record a live sandbox was
// made from, or that a create in progress holds, stays.
func (m *Builder) EvictImages(ctx context.Context) error {
	limit := m.e.Config().ImageCacheSize
	if limit <= 0 {
		return nil
	}
	c := &m.images
	c.evictMu.Lock()
	defer c.evictMu.Unlock()
	recs, err := m.imageRecords(ctx)
	if err != nil {
		return err
	}
	total := m.layerBytes(recs)
	if total <= limit {
		return nil
	}
	live, _, err := m.store.ListSandboxes(ctx, store.SandboxFilter{Owner: store.AnyOwner}, store.Page{})
	if err != nil {
		return err
	}
	inUse := map[string]bool{}
	for _, sb := range live {
		inUse[cacheKey(sb.Tenant, sb.Spec.Template)] = true
	}
	c.mu.Lock()
	lastUse := func(t *store.Template) time.Time {
		if u, ok := c.used[cacheKey(t.Tenant, t.Name)]; ok {
			return u
		}
		return t.CreatedAt
	}
	slices.SortStableFunc(recs, func(a, b *store.Template) int { return lastUse(a).Compare(lastUse(b)) })
	c.mu.Unlock()
	kept := slices.Clone(recs)
	removed := 0
	for _, t := range recs {
		if total <= limit {
			break
		}
		key := cacheKey(t.Tenant, t.Name)
		if inUse[key] {
			continue
		}
		c.mu.Lock()
		if c.pins[key] > 0 {
			c.mu.Unlock()
			continue
		}
		err := m.store.DeleteTenantTemplate(ctx, t.Tenant, t.Name)
		if err == nil {
			delete(c.used, key)
		}
		c.mu.Unlock()
		if err != nil && !errors.Is(err, errdefs.ErrNotFound) {
			return err
		}
		kept = slices.DeleteFunc(kept, func(k *store.Template) bool { return k == t })
		total = m.layerBytes(kept)
		removed++
		m.log.Info("evicted image record", "record", t.Name, "tenant", t.Tenant, "source", t.Source)
	}
	if total > limit {
		m.log.Warn("image cache stays over its cap: the rest is in use", "bytes", total, "cap", limit)
	}
	if removed == 0 {
		return nil
	}
	return m.gcLayers(ctx)
}
