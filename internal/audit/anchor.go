package audit

// The anchor: the audit chains' heads, signed and kept outside the
// database. Verify alone cannot tell a chain whose last records were
// deleted and whose head row was rewound to match from one that never had
// them; an anchor can. The daemon signs the heads of every chain at an
// interval (Ed25519, with AnchorKeyFile, a key in the data dir that never
// enters the database), writes the result to a file beside the data dir
// (atomically: the old anchor or the new, never a part) and to its log,
// and, when it is given one, POSTs it to a webhook (serve
// --audit-anchor-webhook): a copy on another machine, which whoever holds
// the database cannot rewind.
// VerifyAnchor then checks, for every chain the anchor names, that the
// chain still holds the anchored record, unchanged: a chain cut below it
// or a head rewound past it fails.

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	neturl "net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/berth-sh/berth/internal/atomicfile"
	"github.com/berth-sh/berth/internal/store"
)

// AnchorKeyFile is the file, in the data dir, holding the anchor signing
// key (an Ed25519 seed, 0600).
const AnchorKeyFile = "audit-anchor.key"

// Anchor is a signed record of the audit chains' heads at a moment.
type Anchor struct {
	Version int       `json:"version"`
	Time    time.Time `json:"time"`
	// Heads is the head of every chain, by tenant ("" the host's).
	Heads map[string]store.AuditHead `json:"heads"`
	// Key is the signer's public key (hex), for reference only: a check
	// uses the verifier's own key, never this one.
	Key string `json:"key"`
	// Sig is the Ed25519 signature (hex) over Payload.
	Sig string `json:"sig"`
}

// maxAnchorTenants bounds the chains one anchor may name (what a check
// reads of an untrusted file).
const maxAnchorTenants = 1 << 20

// Payload is the canonical bytes an anchor's signature covers: the domain
// tag, the version, the time and each head by tenant in byte order,
// length-prefixed so no two anchors share one.
func (a *Anchor) Payload() []byte {
	var b strings.Builder
	b.WriteString("berth-audit-anchor\x00")
	b.WriteString(strconv.Itoa(a.Version) + "\x00")
	b.WriteString(strconv.FormatInt(a.Time.UnixNano(), 10) + "\x00")
	tenants := make([]string, 0, len(a.Heads))
	for t := range a.Heads {
		tenants = append(tenants, t)
	}
	slices.Sort(tenants)
	for _, t := range tenants {
		h := a.Heads[t]
		b.WriteString(strconv.Itoa(len(t)) + ":" + t + "\x00")
		b.WriteString(strconv.FormatInt(h.Seq, 10) + "\x00")
		b.WriteString(strconv.Itoa(len(h.Hash)) + ":" + h.Hash + "\x00")
	}
	return []byte(b.String())
}

// OpenAnchorKey loads (creating on first use, mode 0600) the anchor key
// in dataDir.
func OpenAnchorKey(dataDir string) (ed25519.PrivateKey, error) {
	path := filepath.Join(dataDir, AnchorKeyFile)
	seed, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		seed = make([]byte, ed25519.SeedSize)
		if _, err := rand.Read(seed); err != nil {
			return nil, err
		}
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return nil, fmt.Errorf("writing the audit anchor key: %w", err)
		}
		if _, err := f.Write(seed); err != nil {
			f.Close()
			return nil, fmt.Errorf("writing the audit anchor key: %w", err)
		}
		if err := f.Close(); err != nil {
			return nil, fmt.Errorf("writing the audit anchor key: %w", err)
		}
	} else if err != nil {
		return nil, fmt.Errorf("reading the audit anchor key: %w", err)
	}
	if len(seed) != ed25519.SeedSize {
		return nil, fmt.Errorf("audit anchor key %s: want %d bytes, got %d", path, ed25519.SeedSize, len(seed))
	}
	return ed25519.NewKeyFromSeed(seed), nil
}

// DefaultAnchorPath is where a daemon with data dir dataDir writes its
// anchor: beside the data dir, so a copy of the data dir (the database
// with it) does not carry the anchor that would expose its rewind.
func DefaultAnchorPath(dataDir string) string {
	dataDir = filepath.Clean(dataDir)
	return filepath.Join(filepath.Dir(dataDir), filepath.Base(dataDir)+".audit-anchor.json")
}

// Anchorer signs and writes anchors of a store's chains.
type Anchorer struct {
	st   store.Audit
	key  ed25519.PrivateKey
	path string
	log  *slog.Logger
	now  func() time.Time
	// hook, if set, is the URL each anchor is POSTed to, and hc the
	// client that does it.
	hook string
	hc   *http.Client
}

// anchorPostTimeout bounds one POST of an anchor to its webhook.
const anchorPostTimeout = 10 * time.Second

// PostTo makes every anchor written also POSTed, as JSON, to url (an
// http or https URL) with hc (nil: a client of its own). The anchor is
// signed: the receiver checks it with the daemon's anchor key (`Key`,
// checked against a copy it holds), and a lost POST is the next one's
// (the file and the log stay the record).
func (an *Anchorer) PostTo(url string, hc *http.Client) error {
	u, err := neturl.Parse(url)
	if err != nil || u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return fmt.Errorf("audit anchor webhook %q: want an http(s) URL", url)
	}
	if hc == nil {
		hc = &http.Client{Timeout: anchorPostTimeout}
	}
	an.hook, an.hc = url, hc
	return nil
}

// NewAnchorer returns an Anchorer writing to path (and, each time, a line
// to log).
func NewAnchorer(st store.Audit, key ed25519.PrivateKey, path string, log *slog.Logger) *Anchorer {
	if log == nil {
		log = slog.Default()
	}
	return &Anchorer{st: st, key: key, path: path, log: log, now: time.Now}
}

// Sign makes the anchor of the chains' heads now.
func (an *Anchorer) Sign(ctx context.Context) (*Anchor, error) {
	heads, err := an.st.AuditHeads(ctx, store.AnyOwner)
	if err != nil {
		return nil, err
	}
	a := &Anchor{Version: 1, Time: an.now().UTC(), Heads: heads,
		Key: hex.EncodeToString(an.key.Public().(ed25519.PublicKey))}
	if a.Heads == nil {
		a.Heads = map[string]store.AuditHead{}
	}
	a.Sig = hex.EncodeToString(ed25519.Sign(an.key, a.Payload()))
	return a, nil
}

// Write signs an anchor and writes it out: the file (atomically, 0644:
// it holds hashes only) and a line of the daemon's log.
func (an *Anchorer) Write(ctx context.Context) error {
	a, err := an.Sign(ctx)
	if err != nil {
		return err
	}
	b, err := json.MarshalIndent(a, "", "  ")
	if err != nil {
		return err
	}
	if err := atomicfile.Write(an.path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("writing the audit anchor: %w", err)
	}
	an.log.Info("audit anchor", "file", an.path, "chains", len(a.Heads), "time", a.Time, "sig", a.Sig)
	if an.hook != "" {
		if err := an.post(ctx, b); err != nil {
			an.log.Warn("posting the audit anchor to its webhook failed", "err", err)
		}
	}
	return nil
}

// post sends one anchor to the webhook.
func (an *Anchorer) post(ctx context.Context, body []byte) error {
	ctx, cancel := context.WithTimeout(ctx, anchorPostTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, an.hook, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := an.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("the webhook answered %s", resp.Status)
	}
	return nil
}

// Run writes an anchor every interval until ctx ends, and a last one then.
func (an *Anchorer) Run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if err := an.Write(ctx); err != nil && ctx.Err() == nil {
			an.log.Warn("writing the audit anchor failed", "err", err)
		}
		select {
		case <-t.C:
		case <-ctx.Done():
			wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			_ = an.Write(wctx)
			cancel()
			return
		}
	}
}

// ParseAnchor reads an anchor file's content, refusing what is not one.
func ParseAnchor(b []byte) (*Anchor, error) {
	var a Anchor
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&a); err != nil {
		return nil, fmt.Errorf("not an audit anchor: %w", err)
	}
	switch {
	case a.Version != 1:
		return nil, fmt.Errorf("audit anchor version %d: want 1", a.Version)
	case len(a.Heads) > maxAnchorTenants:
		return nil, fmt.Errorf("audit anchor names %d chains: at most %d", len(a.Heads), maxAnchorTenants)
	case a.Sig == "":
		return nil, errors.New("audit anchor is not signed")
	}
	for t, h := range a.Heads {
		if h.Seq < 0 || len(t) > 256 {
			return nil, fmt.Errorf("audit anchor: bad head of chain %q", t)
		}
	}
	return &a, nil
}

// CheckSignature verifies a's signature under pub.
func CheckSignature(a *Anchor, pub ed25519.PublicKey) error {
	sig, err := hex.DecodeString(a.Sig)
	if err != nil || len(sig) != ed25519.SignatureSize || !ed25519.Verify(pub, a.Payload(), sig) {
		return errors.New("the audit anchor's signature is not this daemon's: forged or edited")
	}
	return nil
}

// VerifyAnchor checks the chains o sees against anchor a, whose signature
// the caller checked: each chain the anchor names (of those o sees) still
// holds its anchored record with the anchored hash, and its head is not
// below it. The first chain found cut or rewound is the report's Bad.
func (l *Log) VerifyAnchor(ctx context.Context, o store.Owner, a *Anchor) (*Report, error) {
	rep, err := l.Verify(ctx, o)
	if err != nil || !rep.OK {
		return rep, err
	}
	heads, err := l.st.AuditHeads(ctx, o)
	if err != nil {
		return nil, err
	}
	want := map[string]store.AuditHead{}
	for t, h := range a.Heads {
		if o.Sees(t) && h.Seq > 0 {
			want[t] = h
		}
	}
	found := map[string]bool{}
	err = l.st.ScanAudit(ctx, o, func(r *store.AuditRecord) error {
		if h, ok := want[r.Tenant]; ok && r.Seq == h.Seq {
			if r.Hash != h.Hash {
				rep.Bad = &Bad{Tenant: r.Tenant, Seq: r.Seq, Reason: "the record the anchor names was replaced: its hash is not the anchored one"}
				return errStop
			}
			found[r.Tenant] = true
		}
		return nil
	})
	if errors.Is(err, errStop) {
		rep.OK = false
		return rep, nil
	}
	if err != nil {
		return nil, err
	}
	tenants := make([]string, 0, len(want))
	for t := range want {
		tenants = append(tenants, t)
	}
	slices.Sort(tenants)
	for _, t := range tenants {
		h := want[t]
		if cur := heads[t]; !found[t] || cur.Seq < h.Seq {
			rep.OK = false
			rep.Bad = &Bad{Tenant: t, Seq: h.Seq, Reason: fmt.Sprintf(
				"the chain ends at seq %d, below the anchored head %d of %s: records were removed and the head rewound",
				cur.Seq, h.Seq, a.Time.UTC().Format(time.RFC3339))}
			return rep, nil
		}
	}
	return rep, nil
}
