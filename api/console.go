package api

import "time"

// ConsoleCode is the answer of POST /v1/console/codes (the host's own,
// `berth console`): a one-time sign-in code for the web console, and the
// console URLs of the daemon's TCP listeners with the code in their
// fragment (which a browser never sends to a server nor puts in a
// Referer).
type ConsoleCode struct {
	Code      string    `json:"code"`
	ExpiresAt time.Time `json:"expires_at"`
	URLs      []string  `json:"urls,omitempty"`
}

// ConsoleSessionRequest is the body of POST /v1/console/session: the
// console trades a sign-in code for a short-lived API key.
type ConsoleSessionRequest struct {
	Code string `json:"code"`
}

// ConsoleSession is that key: the host's scope (admin, tenant ""), for
// ConsoleSessionTTL, shown once. The console keeps it in its tab's
// sessionStorage and revokes it at sign-out.
type ConsoleSession struct {
	APIKey    string    `json:"api_key"`
	KeyID     string    `json:"key_id"`
	ExpiresAt time.Time `json:"expires_at"`
}

// WhoAmI is the answer of GET /v1/whoami: the credential the request
// carried, as the daemon sees it (never the key itself). The console asks
// it once at sign-in to show only the actions the caller's scopes allow.
// Role is the narrowest role (viewer, member, admin) whose scopes hold
// every scope of the key; Host marks the host's administrator, the only
// caller of the host routes (tenants, metrics, doctor).
type WhoAmI struct {
	Actor  string   `json:"actor"`
	KeyID  string   `json:"key_id,omitempty"`
	Tenant string   `json:"tenant"`
	Role   string   `json:"role"`
	Scopes []string `json:"scopes"`
	Host   bool     `json:"host"`
}

// Webhook is one endpoint of GET /v1/webhooks (the host's administrator
// alone): the URL `berth serve --webhook-url` configured, with its user,
// password and query values replaced by "redacted" (the path is kept);
// whether deliveries are signed (--webhook-secret; never the secret); the
// last event handled; and this daemon's delivery attempts since it
// started (on a shared store only the replica holding the store's lease
// delivers), newest first, at most 20.
type Webhook struct {
	URL         string            `json:"url"`
	Signed      bool              `json:"signed"`
	LastEventID int64             `json:"last_event_id"`
	Delivered   int64             `json:"delivered"`
	Failed      int64             `json:"failed"`
	Recent      []WebhookDelivery `json:"recent"`
}

// WebhookDelivery is one attempt to post an event: the receiver's HTTP
// status (0: no answer) and, when it failed, why (without the URL).
type WebhookDelivery struct {
	EventID int64     `json:"event_id"`
	Attempt int       `json:"attempt"`
	Status  int       `json:"status"`
	Error   string    `json:"error,omitempty"`
	Time    time.Time `json:"time"`
}
