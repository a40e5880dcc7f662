package btrfs

import (
	"reflect"
	"testing"

	"github.com/stead-dev/stead/internal/treediff"
)

func TestDiffExtentsFindsWhereTwoExtentMapsDiffer(t *testing.T) {
	e := func(off, end int64, id string, in int64) extent {
		return extent{off: off, end: end, id: id, inExtOf: in}
	}
	for _, tc := range []struct {
		name string
		a, b []extent
		want []treediff.Range
	}{
		{"equal", []extent{e(0, 100, "x", 0)}, []extent{e(0, 100, "x", 0)}, nil},
		{"both holes", nil, nil, nil},
		{"rewritten middle", []extent{e(0, 100, "x", 0)},
			[]extent{e(0, 40, "x", 0), e(40, 60, "y", 0), e(60, 100, "x", 60)}, []treediff.Range{{Off: 40, Len: 20}}},
		{"same extent, other offset into it", []extent{e(0, 100, "x", 0)}, []extent{e(0, 100, "x", 10)},
			[]treediff.Range{{Off: 0, Len: 100}}},
		{"hole punched", []extent{e(0, 100, "x", 0)}, []extent{e(0, 30, "x", 0), e(70, 100, "x", 70)},
			[]treediff.Range{{Off: 30, Len: 40}}},
		{"appended", []extent{e(0, 100, "x", 0)}, []extent{e(0, 100, "x", 0), e(100, 150, "z", 0)},
			[]treediff.Range{{Off: 100, Len: 50}}},
		{"truncated", []extent{e(0, 100, "x", 0)}, []extent{e(0, 50, "x", 0)}, []treediff.Range{{Off: 50, Len: 50}}},
		{"split but equal", []extent{e(0, 100, "x", 0)}, []extent{e(0, 50, "x", 0), e(50, 100, "x", 50)}, nil},
		{"adjacent changes merge", []extent{e(0, 100, "x", 0)}, []extent{e(0, 50, "y", 0), e(50, 100, "z", 0)},
			[]treediff.Range{{Off: 0, Len: 100}}},
		{"inline changed", []extent{e(0, 10, "iabc", 0)}, []extent{e(0, 10, "iabd", 0)}, []treediff.Range{{Off: 0, Len: 10}}},
	} {
		if got := diffExtents(tc.a, tc.b); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: got %v, want %v", tc.name, got, tc.want)
		}
	}
}
