// Package egressrule is the grammar of egress rules, as pure functions:
// parsing and validation (Parse, ParseAll, Check), the canonical form two
// spellings of one rule share (Canonical), and what rules allow (Allows,
// AllowsTCP, MatchDomain). It takes no host resource and imports nothing
// of the network's machinery, so the engine, every node backend (the
// local one's nftables and resolver, the Kubernetes one's NetworkPolicy
// and resolver, the in-memory double) and the doors read one rule the
// same way; package network turns parsed rules into nftables objects.
package egressrule
