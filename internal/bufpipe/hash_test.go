package bufpipe

import (
	"bytes"
	"crypto/sha256"
	"math/rand"
	"testing"

	"go.uber.org/goleak"
)

func TestHashIsTheHashOfEveryWrite(t *testing.T) {
	data := make([]byte, 5<<20+123)
	rand.New(rand.NewSource(1)).Read(data)
	want := sha256.Sum256(data)
	a := NewHash(sha256.New(), 64<<10, 3)
	rng := rand.New(rand.NewSource(2))
	for b := data; len(b) > 0; {
		k := min(len(b), 1+rng.Intn(200<<10)) // writes smaller and larger than a buffer
		if n, err := a.Write(b[:k]); n != k || err != nil {
			t.Fatalf("Write = %d, %v", n, err)
		}
		b = b[k:]
	}
	if got := a.Sum([]byte("x")); !bytes.Equal(got, append([]byte("x"), want[:]...)) {
		t.Fatalf("Sum = %x, want x+%x", got, want)
	}
	if got := a.Sum(nil); !bytes.Equal(got, want[:]) {
		t.Fatalf("second Sum = %x, want %x", got, want)
	}
	a.Write([]byte("ignored after the sum"))
	a.Close()
	if got := a.Sum(nil); !bytes.Equal(got, want[:]) {
		t.Fatalf("Sum after Close = %x, want %x", got, want)
	}
	empty := NewHash(sha256.New(), 64<<10, 3)
	if got, want := empty.Sum(nil), sha256.Sum256(nil); !bytes.Equal(got, want[:]) {
		t.Fatalf("Sum of nothing = %x, want %x", got, want)
	}
}

func TestHashCloseEndsItsGoroutine(t *testing.T) {
	current := goleak.IgnoreCurrent()
	for range 50 {
		a := NewHash(sha256.New(), 4<<10, 2)
		a.Write(make([]byte, 100<<10))
		a.Close()
		a.Close()
		if got := a.Sum(nil); got != nil {
			t.Fatalf("Sum after Close = %x, want nothing", got)
		}
	}
	if err := goleak.Find(current); err != nil {
		t.Fatalf("goroutines left after 50 closed hashes:\n%v", err)
	}
}
