package bytesize

import "testing"

// TestParse covers every spelling the flags (--limit-rate, --chunk-size,
// --weights-size) and rule files (max_size: ...) accepted before they
// shared this parser.
func TestParse(t *testing.T) {
	cases := []struct {
		in   string
		want int64
		bad  bool
	}{
		{"0", 0, false},
		{"4096", 4096, false},
		{" 4096 ", 4096, false},
		{"7B", 7, false},
		{"10k", 10e3, false},
		{"10KB", 10e3, false},
		{"10KiB", 10 << 10, false},
		{"16MiB", 16 << 20, false},
		{"16mi", 16 << 20, false},
		{"150MiB", 150 << 20, false},
		{"100M", 100e6, false},
		{"100 MB", 100e6, false},
		{"500mb", 500e6, false},
		{"1.5G", 1.5e9, false},
		{"1.5GiB", 3 << 29, false},
		{"2GiB", 2 << 30, false},
		{"1T", 1e12, false},
		{"1TiB", 1 << 40, false},
		{"", 0, true},
		{"B", 0, true},
		{"MiB", 0, true},
		{"-1M", 0, true},
		{"fast", 0, true},
		{"lots", 0, true},
		{"1e30", 0, true},
		{"NaN", 0, true},
		{"inf", 0, true},
		{"10 PiB", 0, true},
	}
	for _, tc := range cases {
		got, err := Parse(tc.in)
		if (err != nil) != tc.bad || got != tc.want {
			t.Errorf("Parse(%q) = %d, %v; want %d (error %v)", tc.in, got, err, tc.want, tc.bad)
		}
	}
}

func TestFormat(t *testing.T) {
	cases := []struct {
		in   int64
		want string
	}{
		{0, "0 B"},
		{1023, "1023 B"},
		{1024, "1.0 KiB"},
		{1536, "1.5 KiB"},
		{150 << 20, "150.0 MiB"},
		{7 << 30, "7.0 GiB"},
		{1 << 40, "1.0 TiB"},
	}
	for _, tc := range cases {
		if got := Format(tc.in); got != tc.want {
			t.Errorf("Format(%d) = %q, want %q", tc.in, got, tc.want)
		}
		// What Format prints, Parse reads back (to the precision shown).
		if back, err := Parse(tc.want); err != nil || back != tc.in {
			t.Errorf("Parse(Format(%d)) = %d, %v", tc.in, back, err)
		}
	}
}
