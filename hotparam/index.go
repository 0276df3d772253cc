package hotparam

// index maps a shard's values to their slots: an open-addressing table with linear probing.
// Each entry packs the high 32 bits of the value's hash (its fingerprint, which also picks its
// home position) with the slot number plus one; 0 is an empty entry. It costs 8 bytes per entry
// at a load of 3/8 to 3/4, against some 35 bytes per value for a Go map of strings.
type index struct {
	tab []uint64
	n   int
}

func fingerprint(h uint64) uint32 { return uint32(h >> 32) }

// find returns the position of key's entry (hash h) and its slot, or -1 when absent.
func (x *index) find(sh *shard, key string, h uint64) (pos int, slot int32) {
	if len(x.tab) == 0 {
		return -1, -1
	}
	fp := fingerprint(h)
	mask := len(x.tab) - 1
	for i := int(fp) & mask; ; i = (i + 1) & mask {
		e := x.tab[i]
		if e == 0 {
			return -1, -1
		}
		if uint32(e>>32) == fp {
			s := int32(uint32(e)) - 1
			if sh.at(s).key.is(&sh.long, key) {
				return i, s
			}
		}
	}
}

// insert adds slot s for a value of hash h that is not in the index.
func (x *index) insert(h uint64, s int32) {
	if (x.n+1)*4 > len(x.tab)*3 {
		x.grow()
	}
	x.put(uint64(fingerprint(h))<<32 | uint64(uint32(s+1)))
	x.n++
}

func (x *index) put(e uint64) {
	mask := len(x.tab) - 1
	i := int(uint32(e>>32)) & mask
	for x.tab[i] != 0 {
		i = (i + 1) & mask
	}
	x.tab[i] = e
}

func (x *index) grow() {
	old := x.tab
	x.tab = make([]uint64, max(2*len(old), 16))
	for _, e := range old {
		if e != 0 {
			x.put(e)
		}
	}
}

// delete removes the entry at pos, shifting back the entries after it that would otherwise be
// cut off from their home position.
func (x *index) delete(pos int) {
	mask := len(x.tab) - 1
	x.tab[pos] = 0
	x.n--
	for j := (pos + 1) & mask; x.tab[j] != 0; j = (j + 1) & mask {
		home := int(uint32(x.tab[j]>>32)) & mask
		// the entry at j may move to the hole at pos if its home is not in (pos, j] cyclically.
		if (j > pos && (home <= pos || home > j)) || (j < pos && home <= pos && home > j) {
			x.tab[pos], x.tab[j] = x.tab[j], 0
			pos = j
		}
	}
}
