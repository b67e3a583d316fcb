package htmlreport

// Rect is a box in the treemap's coordinates.
type Rect struct{ X, Y, W, H float64 }

// squarify lays out areas (largest first, summing to at most r's area) in
// r with the squarified treemap algorithm (Bruls, Huizing, van Wijk):
// rows along the shorter side, a row growing while its worst aspect ratio
// improves. It returns one Rect per area, in order.
func squarify(areas []float64, r Rect) []Rect {
	out := make([]Rect, 0, len(areas))
	for i := 0; i < len(areas); {
		short := min(r.W, r.H)
		if short <= 0 {
			for ; i < len(areas); i++ {
				out = append(out, Rect{X: r.X, Y: r.Y})
			}
			break
		}
		j, sum, best := i, 0.0, 0.0
		for j < len(areas) {
			s := sum + areas[j]
			w := worst(areas[i:j+1], s, short)
			if j > i && w > best {
				break
			}
			sum, best = s, w
			j++
		}
		if r.W >= r.H {
			cw := 0.0
			if r.H > 0 {
				cw = min(sum/r.H, r.W)
			}
			y := r.Y
			for _, a := range areas[i:j] {
				h := 0.0
				if cw > 0 {
					h = a / cw
				}
				out = append(out, Rect{r.X, y, cw, h})
				y += h
			}
			r.X, r.W = r.X+cw, r.W-cw
		} else {
			rh := min(sum/r.W, r.H)
			x := r.X
			for _, a := range areas[i:j] {
				w := 0.0
				if rh > 0 {
					w = a / rh
				}
				out = append(out, Rect{x, r.Y, w, rh})
				x += w
			}
			r.Y, r.H = r.Y+rh, r.H-rh
		}
		i = j
	}
	return out
}

// worst is the largest aspect ratio in a row of areas summing to sum laid
// along a side of length short.
func worst(row []float64, sum, short float64) float64 {
	if sum <= 0 {
		return 0
	}
	hi, lo := row[0], row[0]
	for _, a := range row {
		hi, lo = max(hi, a), min(lo, a)
	}
	if lo <= 0 {
		return 1e300
	}
	s2, sum2 := short*short, sum*sum
	return max(s2*hi/sum2, sum2/(s2*lo))
}
