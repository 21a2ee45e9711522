package selftest

// Catalogue returns every attack, in report order: category by category
// (Categories), as each category's file lists them.
func Catalogue() []*Attack {
	var all []*Attack
	for _, part := range [][]*Attack{kernelAttacks(), procAttacks(), capsAttacks(), cveAttacks(), agentAttacks(),
		resourceAttacks(), netAttacks(), crossAttacks(), filesAttacks(), apiAttacks()} {
		all = append(all, part...)
	}
	return all
}
