package auth

// ScopeSecrets manages the tenant's secrets (set, list names, remove).
// Referencing a secret at create needs only sandboxes:write; no route ever
// returns a value. Kept in its own file so the tenants branch, which adds
// it to Scopes too, merges by deleting this file.
const ScopeSecrets Scope = "secrets"

func init() { Scopes = append(Scopes, ScopeSecrets) }
