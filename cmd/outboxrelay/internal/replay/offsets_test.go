package replay

import (
	"encoding/json"
	"math/rand/v2"
	"slices"
	"testing"
)

func TestOffsets(t *testing.T) {
	for _, tc := range []struct {
		name string
		add  []int64
		want [][2]int64
	}{
		{"none", nil, nil},
		{"in order, one range", []int64{0, 1, 2, 3}, [][2]int64{{0, 3}}},
		{"a gap", []int64{0, 1, 5, 6}, [][2]int64{{0, 1}, {5, 6}}},
		{"the gap filled joins them", []int64{0, 1, 3, 4, 2}, [][2]int64{{0, 4}}},
		{"before the first", []int64{5, 3, 4}, [][2]int64{{3, 5}}},
		{"again", []int64{7, 7, 7}, [][2]int64{{7, 7}}},
		{"out of order", []int64{10, 2, 6, 1, 11, 3}, [][2]int64{{1, 3}, {6, 6}, {10, 11}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := &offsets{}
			for _, x := range tc.add {
				o.add(x)
			}
			if !slices.Equal(o.ranges, tc.want) {
				t.Errorf("ranges %v, want %v", o.ranges, tc.want)
			}
			for _, x := range tc.add {
				if !o.has(x) {
					t.Errorf("has(%d) = false after adding it", x)
				}
			}
		})
	}
}

// TestOffsetsAgreeWithASet: whatever the order offsets are added in, the
// ranges hold exactly those, disjoint, sorted and not touching.
func TestOffsetsAgreeWithASet(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 200 {
		o, set := &offsets{}, map[int64]bool{}
		for range r.IntN(60) {
			x := r.Int64N(80)
			o.add(x)
			set[x] = true
		}
		for x := int64(-1); x < 82; x++ {
			if o.has(x) != set[x] {
				t.Fatalf("has(%d) = %v, the set says %v (ranges %v)", x, o.has(x), set[x], o.ranges)
			}
		}
		for i := 1; i < len(o.ranges); i++ {
			if o.ranges[i][0] <= o.ranges[i-1][1]+1 {
				t.Fatalf("ranges %v overlap or touch", o.ranges)
			}
		}
		b, err := json.Marshal(o)
		if err != nil {
			t.Fatal(err)
		}
		back := &offsets{}
		if err := json.Unmarshal(b, back); err != nil || !slices.Equal(back.ranges, o.ranges) {
			t.Fatalf("%s read back as %v (%v)", b, back.ranges, err)
		}
	}
}
