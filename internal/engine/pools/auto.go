package pools

import (
	"bufio"
	"bytes"
	"maps"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/berth-sh/berth/internal/node"
	"github.com/berth-sh/berth/internal/store"
)

// Warm capacity by default: the host's pool of the default template is
// sized from what creates asked of it recently, with no pool set by
// anyone. A create that a pool member could have served (claimed or
// not) counts as demand; the pool's size is the most such creates that
// arrived within one demandBucket during the last Config.WarmPoolIdle
// (default DefaultWarmPoolIdle), bounded by Config.WarmPoolMax. So a burst
// of 100 leaves 100 ready members for the next one, a steady trickle keeps
// as many as arrive in ten seconds, and an idle host scales back to none:
// the members are retired like those of a pool made smaller. A pool set
// through the API (template pool, apply) replaces the automatic size of
// its template, 0 (none) included, until it is cleared (PUT .../pool
// {"auto": true}, berth template pool NAME --auto); berth serve
// --warm-pool off turns the automatic pool off. Only classes that freeze their members (no
// CPU while they wait) get one: on Kubernetes a waiting member holds a
// pod's reservation, so there it is off unless set.

// demandBucket is the width of the demand window: the pool holds the
// most creates seen within one bucket.
const demandBucket = 10 * time.Second

// DefaultWarmPoolIdle is how long the automatic pool keeps its size after
// the last demand that set it.
const DefaultWarmPoolIdle = 10 * time.Minute

// memberMemory is the host memory a frozen member is reckoned to hold
// (its agent's and the runtime's pages; measured at 5-8 MiB on runc), for
// the automatic pool's default bound.
const memberMemory = 8 << 20

// autoMemoryShare is the part of host memory the automatic pool may take
// by default (1/16).
const autoMemoryShare = 16

// demand counts the automatic pool's poolable creates per bucket.
type demand struct {
	mu      sync.Mutex
	buckets map[int64]int // bucket start (unix ns / demandBucket) → creates
}

// note records one poolable create at now.
func (d *demand) note(now time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.buckets == nil {
		d.buckets = map[int64]int{}
	}
	d.buckets[now.UnixNano()/int64(demandBucket)]++
}

// peak is the most creates of one bucket within idle before now; older
// buckets are dropped.
func (d *demand) peak(now time.Time, idle time.Duration) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	oldest := now.Add(-idle).UnixNano() / int64(demandBucket)
	best := 0
	for b, n := range d.buckets {
		if b < oldest {
			delete(d.buckets, b)
			continue
		}
		best = max(best, n)
	}
	return best
}

// autoKey is the pool the automatic size applies to, and whether one does.
func (m *Warm) autoKey() (store.PoolKey, bool) {
	cfg := m.e.Config()
	if cfg.WarmPool < 0 || cfg.DefaultTemplate == "" {
		return store.PoolKey{}, false
	}
	caps, ok := node.ClassCaps(m.node, m.e.DefaultRuntime())
	if !ok || !caps.Freeze {
		return store.PoolKey{}, false
	}
	return store.PoolKey{Template: cfg.DefaultTemplate}, true
}

// autoSize is the automatic pool's size now: Config.WarmPool when fixed,
// else the recent demand's peak within the bound.
func (m *Warm) autoSize() int {
	cfg := m.e.Config()
	if cfg.WarmPool > 0 {
		return min(cfg.WarmPool, MaxPoolSize)
	}
	idle := cfg.WarmPoolIdle
	if idle <= 0 {
		idle = DefaultWarmPoolIdle
	}
	return min(m.demand.peak(m.e.Now(), idle), m.autoMax)
}

// sizes is pools (the sizes set through the API) with the automatic
// pool's size added where it applies: its template has no size set (0
// set is a size: none).
func (m *Warm) sizes(pools map[store.PoolKey]int) map[store.PoolKey]int {
	k, ok := m.autoKey()
	if _, set := pools[k]; !ok || set {
		return pools
	}
	n := m.autoSize()
	if n == 0 {
		return pools
	}
	out := make(map[store.PoolKey]int, len(pools)+1)
	maps.Copy(out, pools)
	out[k] = n
	return out
}

// isAuto reports whether pool k is sized automatically now.
func (m *Warm) isAuto(k store.PoolKey, pools map[store.PoolKey]int) bool {
	ak, ok := m.autoKey()
	_, set := pools[k]
	return ok && k == ak && !set
}

// defaultAutoMax is the automatic pool's bound when none is configured:
// members in 1/16 of the host's memory at memberMemory each, at most
// MaxPoolSize, at least 8.
func defaultAutoMax() int {
	total := memTotal()
	if total <= 0 {
		return 32
	}
	return max(8, min(MaxPoolSize, int(total/autoMemoryShare/memberMemory)))
}

// memTotal is the host's memory in bytes from /proc/meminfo, or 0.
func memTotal() int64 {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Bytes()
		if v, ok := bytes.CutPrefix(line, []byte("MemTotal:")); ok {
			fields := bytes.Fields(v)
			if len(fields) == 0 {
				return 0
			}
			kb, err := strconv.ParseInt(string(fields[0]), 10, 64)
			if err != nil {
				return 0
			}
			return kb << 10
		}
	}
	return 0
}
