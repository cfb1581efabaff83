package replay

import (
	"encoding/json"
	"slices"
	"sort"
)

// offsets is a set of offsets of one partition, kept as sorted, disjoint,
// inclusive ranges: a redrive of every dead letter of a partition is one
// range however many there were, and a redrive of a few ids adds a range
// each, so the set stays small where a set of offsets would grow with the
// topic.
type offsets struct {
	ranges [][2]int64
}

// has reports whether x is in the set.
func (o *offsets) has(x int64) bool {
	i := sort.Search(len(o.ranges), func(i int) bool { return o.ranges[i][1] >= x })
	return i < len(o.ranges) && o.ranges[i][0] <= x
}

// add puts x in the set, joining the ranges it touches.
func (o *offsets) add(x int64) {
	i := sort.Search(len(o.ranges), func(i int) bool { return o.ranges[i][1] >= x-1 })
	switch {
	case i < len(o.ranges) && o.ranges[i][0] <= x && x <= o.ranges[i][1]:
		return
	case i < len(o.ranges) && o.ranges[i][1] == x-1:
		o.ranges[i][1] = x
	case i < len(o.ranges) && o.ranges[i][0] == x+1:
		o.ranges[i][0] = x
		return
	default:
		o.ranges = slices.Insert(o.ranges, i, [2]int64{x, x})
		return
	}
	// Extended at its end: it may now touch the next one.
	if i+1 < len(o.ranges) && o.ranges[i+1][0] == x+1 {
		o.ranges[i][1] = o.ranges[i+1][1]
		o.ranges = slices.Delete(o.ranges, i+1, i+2)
	}
}

// clone is a copy of o that adding to does not change o.
func (o *offsets) clone() *offsets {
	return &offsets{ranges: slices.Clone(o.ranges)}
}

func (o *offsets) MarshalJSON() ([]byte, error) {
	if o.ranges == nil {
		return []byte("[]"), nil
	}
	return json.Marshal(o.ranges)
}

func (o *offsets) UnmarshalJSON(b []byte) error { return json.Unmarshal(b, &o.ranges) }
