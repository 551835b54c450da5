// Package hash64 is the one 64-bit string hash freqcap's statistics use:
// FNV-1a, then the SplitMix64 finaliser to spread its bits. It is
// deterministic (no per-process seed), so every process and every run
// agrees: the fleet recorder picks its traffic sample and counts people
// with it, the memory backend's distinct-member counter indexes with it.
package hash64

// String returns s's hash, without allocating.
func String(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	h ^= h >> 30
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 27
	h *= 0x94d049bb133111eb
	h ^= h >> 31
	return h
}
