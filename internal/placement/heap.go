package placement

// candidateHeap is a binary min-heap of candidates under less.
type candidateHeap struct {
	cands []candidate
	less  func(a, b *candidate) bool
}

func (h *candidateHeap) push(c candidate) {
	h.cands = append(h.cands, c)
	for i := len(h.cands) - 1; i > 0; {
		up := (i - 1) / 2
		if !h.less(&h.cands[i], &h.cands[up]) {
			return
		}
		h.cands[i], h.cands[up] = h.cands[up], h.cands[i]
		i = up
	}
}

func (h *candidateHeap) pop() candidate {
	top := h.cands[0]
	last := len(h.cands) - 1
	h.cands[0] = h.cands[last]
	h.cands = h.cands[:last]
	h.down(0)
	return top
}

func (h *candidateHeap) down(i int) {
	c := h.cands
	for {
		least, l, r := i, 2*i+1, 2*i+2
		if l < len(c) && h.less(&c[l], &c[least]) {
			least = l
		}
		if r < len(c) && h.less(&c[r], &c[least]) {
			least = r
		}
		if least == i {
			return
		}
		c[i], c[least] = c[least], c[i]
		i = least
	}
}
