package auth

// ScopeAudit reads, exports and verifies the audit log. Until it is listed
// in Scopes, the audit routes require ScopeAdmin.
const ScopeAudit Scope = "audit"
