package client

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/berth-sh/berth/api"
)

// AuditFilter selects entries of ListAudit; zero fields select all.
type AuditFilter struct {
	Since, Until time.Time
	Actor        string
	Action       string
	Target       string
}

func (f AuditFilter) query() url.Values {
	q := url.Values{}
	if !f.Since.IsZero() {
		q.Set("since", f.Since.UTC().Format(time.RFC3339Nano))
	}
	if !f.Until.IsZero() {
		q.Set("until", f.Until.UTC().Format(time.RFC3339Nano))
	}
	for k, v := range map[string]string{"actor": f.Actor, "action": f.Action, "target": f.Target} {
		if v != "" {
			q.Set(k, v)
		}
	}
	return q
}

// ListAudit returns every audited action f selects, oldest first.
func (c *Client) ListAudit(ctx context.Context, f AuditFilter) ([]api.AuditEntry, error) {
	return listAll[api.AuditEntry](ctx, c, "/v1/audit", f.query())
}

// ListAuditPage returns one page of ListAudit and the next page's cursor.
func (c *Client) ListAuditPage(ctx context.Context, f AuditFilter, p Page) ([]api.AuditEntry, string, error) {
	return listPage[api.AuditEntry](ctx, c, "/v1/audit", f.query(), p)
}

// ExportAudit copies every sealed audit record, JSON lines, to w.
func (c *Client) ExportAudit(ctx context.Context, w io.Writer) error {
	req, err := c.newRequest(ctx, http.MethodGet, "/v1/audit/export", nil, nil)
	if err != nil {
		return err
	}
	resp, err := c.send(req)
	if err != nil {
		return err
	}
	defer closeBody(resp.Body)
	_, err = io.Copy(w, resp.Body)
	return err
}

// VerifyAuditAnchor has the daemon check the audit chains and, against
// them, anchor: the content of an anchor file it wrote (serve
// --audit-anchor-file). A forged or edited anchor is an error; a chain cut
// below its anchored head is a Bad answer.
func (c *Client) VerifyAuditAnchor(ctx context.Context, anchor []byte) (*api.AuditVerify, error) {
	var v api.AuditVerify
	if err := c.do(ctx, http.MethodPost, "/v1/audit/verify", nil, api.AuditVerifyRequest{Anchor: anchor}, &v); err != nil {
		return nil, err
	}
	return &v, nil
}

// VerifyAudit has the daemon check the audit chains.
func (c *Client) VerifyAudit(ctx context.Context) (*api.AuditVerify, error) {
	var v api.AuditVerify
	if err := c.do(ctx, http.MethodPost, "/v1/audit/verify", nil, nil, &v); err != nil {
		return nil, err
	}
	return &v, nil
}
