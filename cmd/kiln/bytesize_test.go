package main

import "testing"

func TestParseByteSize(t *testing.T) {
	cases := []struct {
		in   string
		want int64
		bad  bool
	}{
		{"0", 0, false},
		{"4096", 4096, false},
		{"16MiB", 16 << 20, false},
		{"16mi", 16 << 20, false},
		{"100M", 100e6, false},
		{"100 MB", 100e6, false},
		{"1.5G", 1.5e9, false},
		{"2GiB", 2 << 30, false},
		{"10k", 10e3, false},
		{"7B", 7, false},
		{"", 0, true},
		{"-1M", 0, true},
		{"fast", 0, true},
		{"1e30", 0, true},
	}
	for _, tc := range cases {
		got, err := parseByteSize(tc.in)
		if (err != nil) != tc.bad || got != tc.want {
			t.Errorf("parseByteSize(%q) = %d, %v; want %d (error %v)", tc.in, got, err, tc.want, tc.bad)
		}
	}
}
