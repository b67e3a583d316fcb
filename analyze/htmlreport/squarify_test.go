package htmlreport

import (
	"math"
	"testing"
)

// TestSquarify: every area keeps its size, boxes stay inside the rectangle
// and do not overlap, and the largest box is not a sliver.
func TestSquarify(t *testing.T) {
	r := Rect{10, 20, 600, 400}
	areas := []float64{60000, 40000, 30000, 20000, 20000, 10000, 6000, 6000, 4000, 2000, 1000, 500, 500}
	got := squarify(areas, r)
	if len(got) != len(areas) {
		t.Fatalf("%d boxes for %d areas", len(got), len(areas))
	}
	for i, b := range got {
		if math.Abs(b.W*b.H-areas[i]) > 1e-6*areas[i] {
			t.Errorf("box %d: area %.1f, want %.1f", i, b.W*b.H, areas[i])
		}
		if b.X < r.X-1e-9 || b.Y < r.Y-1e-9 || b.X+b.W > r.X+r.W+1e-9 || b.Y+b.H > r.Y+r.H+1e-9 {
			t.Errorf("box %d %+v outside %+v", i, b, r)
		}
		for j, c := range got[:i] {
			if ox, oy := math.Min(b.X+b.W, c.X+c.W)-math.Max(b.X, c.X), math.Min(b.Y+b.H, c.Y+c.H)-math.Max(b.Y, c.Y); ox > 1e-9 && oy > 1e-9 {
				t.Errorf("boxes %d %+v and %d %+v overlap", i, b, j, c)
			}
		}
	}
	if b := got[0]; math.Max(b.W/b.H, b.H/b.W) > 3 {
		t.Errorf("largest box %+v: aspect %.1f", b, math.Max(b.W/b.H, b.H/b.W))
	}
}
