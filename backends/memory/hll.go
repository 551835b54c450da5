package memory

import (
	"math"
	"math/bits"

	"github.com/freqcap/freqcap/internal/hash64"
)

// uniqueSet counts distinct members, as a Redis HyperLogLog does for
// store.Unique: exactly (a set of their 64-bit hashes) up to
// uniqueExactMax members, then as a HyperLogLog of 2^uniqueP registers
// (standard error 1.04/√16384 ≈ 0.81%, as Redis's). The zero value is
// empty.
type uniqueSet struct {
	exact map[uint64]struct{} // nil once converted to registers
	regs  []uint8             // nil while exact
}

const (
	uniqueP        = 14
	uniqueM        = 1 << uniqueP
	uniqueExactMax = 4096
)

// uniqueHash is a member's 64-bit hash: FNV-1a, then the SplitMix64
// finaliser to spread its bits over the registers' index and rank. It is
// deterministic (no per-process seed), so a count is the same in every
// run.
func uniqueHash(member string) uint64 { return hash64.String(member) }

// add adds a member's hash.
func (u *uniqueSet) add(h uint64) {
	if u.regs != nil {
		u.addReg(h)
		return
	}
	if u.exact == nil {
		u.exact = map[uint64]struct{}{}
	}
	u.exact[h] = struct{}{}
	if len(u.exact) > uniqueExactMax {
		u.toRegs()
	}
}

func (u *uniqueSet) toRegs() {
	u.regs = make([]uint8, uniqueM)
	for h := range u.exact {
		u.addReg(h)
	}
	u.exact = nil
}

func (u *uniqueSet) addReg(h uint64) {
	idx := h >> (64 - uniqueP)
	rest := h<<uniqueP | 1<<(uniqueP-1) // a sentinel bit bounds the rank
	rank := uint8(bits.LeadingZeros64(rest)) + 1
	if rank > u.regs[idx] {
		u.regs[idx] = rank
	}
}

// uniqueCount counts the distinct members of the union of sets (nil
// entries are empty): exactly while every set is exact and the union
// holds at most uniqueExactMax members, else by the HyperLogLog estimate
// of the merged registers.
func uniqueCount(sets []*uniqueSet) int64 {
	union := uniqueSet{exact: map[uint64]struct{}{}}
	for _, s := range sets {
		switch {
		case s == nil:
		case s.regs != nil:
			if union.regs == nil {
				union.toRegs()
			}
			for i, r := range s.regs {
				union.regs[i] = max(union.regs[i], r)
			}
		default:
			for h := range s.exact {
				union.add(h)
			}
		}
	}
	if union.regs == nil {
		return int64(len(union.exact))
	}
	return union.estimate()
}

// estimate is the HyperLogLog estimate of the registers, with linear
// counting for small cardinalities (64-bit hashes need no large-range
// correction).
func (u *uniqueSet) estimate() int64 {
	sum, zeros := 0.0, 0
	for _, r := range u.regs {
		sum += math.Ldexp(1, -int(r))
		if r == 0 {
			zeros++
		}
	}
	m := float64(uniqueM)
	e := 0.7213 / (1 + 1.079/m) * m * m / sum
	if e <= 2.5*m && zeros > 0 {
		e = m * math.Log(m/float64(zeros))
	}
	return int64(math.Round(e))
}
