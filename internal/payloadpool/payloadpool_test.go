package payloadpool

import (
	"bytes"
	"runtime"
	"runtime/debug"
	"testing"
	"time"
)

func TestClassesRoundUpByAnEighthOfAPowerOfTwo(t *testing.T) {
	for _, c := range []struct{ n, size int }{
		{MinSize + 1, MinSize + MinSize/8},
		{1 << 20, 1 << 20},
		{1<<20 + 1, 1<<20 + 1<<17},
		{1<<20 + 100, 1<<20 + 1<<17},
		{1<<20 + 1<<17, 1<<20 + 1<<17},
		{1<<20 + 1<<17 + 1, 1<<20 + 2<<17},
		{2<<20 - 1, 2 << 20},
		{1 << maxShift, 1 << maxShift},
	} {
		idx, size := class(c.n)
		if idx < 0 || size != c.size {
			t.Errorf("class(%d) = %d, %d; want size %d", c.n, idx, size, c.size)
		}
		if size < c.n || size-c.n > size/8 {
			t.Errorf("class(%d) wastes %d of %d bytes", c.n, size-c.n, size)
		}
	}
	for _, n := range []int{0, 1, MinSize, 1<<maxShift + 1} {
		if idx, _ := class(n); idx >= 0 {
			t.Errorf("class(%d) = %d, want not pooled", n, idx)
		}
	}
	// Every class index is in range and distinct for distinct sizes.
	seen := map[int]int{}
	for n := MinSize + 1; n <= 1<<maxShift; n += 4093 {
		idx, size := class(n)
		if idx < 0 || idx >= len(classes) {
			t.Fatalf("class(%d) = %d, outside 0..%d", n, idx, len(classes)-1)
		}
		if s, ok := seen[idx]; ok && s != size {
			t.Fatalf("class %d has sizes %d and %d", idx, s, size)
		}
		seen[idx] = size
	}
}

func TestAReleasedBufferIsReusedWithoutClearing(t *testing.T) {
	// sync.Pool drops what it holds at a collection; keep the collector
	// away while the test looks. Under the race detector it also drops a
	// quarter of what is put back, at random: try a few times.
	defer debugGC(t)()
	reused := false
	for try := 0; try < 20 && !reused; try++ {
		b := Get(1<<20 + 7)
		if len(b.B) != 1<<20+7 || cap(b.B) != 1<<20+1<<17 {
			t.Fatalf("len %d cap %d, want %d and %d", len(b.B), cap(b.B), 1<<20+7, 1<<20+1<<17)
		}
		for i := range b.B {
			b.B[i] = byte('a' + try)
		}
		p := &b.B[0]
		b.Release()
		if len(b.B) != 0 {
			t.Fatalf("released buffer still shows %d bytes", len(b.B))
		}
		b.Release()            // a second release does nothing
		c := Get(1<<20 + 1000) // the same class
		d := Get(1<<20 + 1000) // never the same buffer as c
		if &c.B[0] == &d.B[0] {
			t.Fatal("one buffer handed out twice")
		}
		if &c.B[0] == p {
			reused = true
			if !bytes.Equal(c.B[:10], bytes.Repeat([]byte{byte('a' + try)}, 10)) {
				t.Fatalf("reused buffer was cleared: %q", c.B[:10])
			}
		}
		c.Release()
		d.Release()
	}
	if !reused {
		t.Fatal("a buffer of the same class was never reused in 20 tries")
	}
}

func TestSizesOutsideTheClassesAreNotPooled(t *testing.T) {
	defer debugGC(t)()
	for _, n := range []int{0, 1<<maxShift + 1} {
		b := Get(n)
		if len(b.B) != n {
			t.Fatalf("Get(%d) has %d bytes", n, len(b.B))
		}
		if n == 0 {
			b.Release()
			continue
		}
		p := &b.B[0]
		b.Release()
		if c := Get(n); &c.B[0] == p {
			t.Fatalf("a %d-byte buffer was pooled", n)
		}
	}
}

func TestSmallBuffersArePooledByPowerOfTwo(t *testing.T) {
	defer debugGC(t)()
	for _, c := range []struct{ n, size int }{{1, 64}, {64, 64}, {65, 128}, {1000, 1024}, {1024, 1024}, {MinSize - 1, MinSize}, {MinSize, MinSize}} {
		reused := false
		// Under the race detector sync.Pool drops a quarter of what is put
		// back, at random: try a few times.
		for try := 0; try < 20 && !reused; try++ {
			b := Get(c.n)
			if len(b.B) != c.n || cap(b.B) != c.size {
				t.Fatalf("Get(%d): len %d cap %d, want %d and %d", c.n, len(b.B), cap(b.B), c.n, c.size)
			}
			b.B[0] = byte(try)
			p := &b.B[0]
			b.Release()
			b.Release()                      // a second release does nothing
			d, e := Get(c.size), Get(c.size) // the same class
			if &d.B[0] == &e.B[0] {
				t.Fatal("one buffer handed out twice")
			}
			if &d.B[0] == p || &e.B[0] == p {
				reused = true
			}
			d.Release()
			e.Release()
		}
		if !reused {
			t.Fatalf("a %d-byte buffer was never reused in 20 tries", c.n)
		}
	}
}

func TestBacks(t *testing.T) {
	b := Get(1 << 20)
	defer b.Release()
	if !b.Backs(b.B[100:200]) || !b.Backs(b.B[:1]) || !b.Backs(b.B[len(b.B)-1:]) {
		t.Fatal("a slice of the buffer is not backed by it")
	}
	other := make([]byte, 10)
	if b.Backs(other) || b.Backs(nil) || (*Buffer)(nil).Backs(other) {
		t.Fatal("memory outside the buffer is reported as backed by it")
	}
	var nilBuf *Buffer
	nilBuf.Release() // nil is fine
}

// debugGC turns the collector off until the returned func runs.
func debugGC(t *testing.T) func() {
	t.Helper()
	runtime.GC()
	old := debug.SetGCPercent(-1)
	return func() { debug.SetGCPercent(old) }
}

func TestHeldCountsPooledBuffersUntilTheCollectorFreesThem(t *testing.T) {
	// A size no other test uses, so every Get below allocates.
	const n = 40<<20 + 3
	_, size := class(n)
	// Let what earlier tests left be freed and its cleanups run, then keep
	// the collector away while the counts are taken.
	for prev, i := int64(-1), 0; i < 50 && Held() != prev; i++ {
		prev = Held()
		runtime.GC()
		runtime.GC()
		time.Sleep(20 * time.Millisecond)
	}
	gcOn := debugGC(t)
	h0 := Held()
	a, b := Get(n), Get(n)
	if got := Held() - h0; got != int64(2*size) {
		t.Fatalf("two new %d-byte buffers add %d to Held, want %d", size, got, 2*size)
	}
	if small := Get(100); Held()-h0 != int64(2*size) {
		t.Fatal("a small buffer was counted in Held")
	} else {
		small.Release()
	}
	a.Release() // waiting in the pool: still held
	if got := Held() - h0; got != int64(2*size) {
		t.Fatalf("after a Release Held grew by %d, want %d", got, 2*size)
	}
	gcOn()
	runtime.KeepAlive(b)
	b = nil // lost without a Release: the collector frees it all the same
	// sync.Pool keeps what it holds through one collection and drops it at
	// the next; cleanups run after the collection that freed the buffer.
	for i := 0; i < 100 && Held() != h0; i++ {
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
	if got := Held() - h0; got != 0 {
		t.Fatalf("after the buffers were freed Held is %d above where it started", got)
	}
}
