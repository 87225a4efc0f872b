package bus

import (
	"testing"
	"time"
)

// TestScanTimerKeepsItsCadence: an armed scan timer returns once per
// period, never early, and one that fell behind returns at once for the
// periods it missed (a single scan) and then keeps the cadence; disarmed
// and armed again it starts a new period from then.
func TestScanTimerKeepsItsCadence(t *testing.T) {
	for _, period := range []time.Duration{100 * time.Microsecond, 500 * time.Microsecond} {
		t.Run(period.String(), func(t *testing.T) {
			st, err := newScanTimer()
			if err != nil {
				t.Fatal(err)
			}
			defer st.close()
			if err := st.arm(period); err != nil {
				t.Fatal(err)
			}
			const n = 20
			start := time.Now()
			for range n {
				if err := st.wait(); err != nil {
					t.Fatal(err)
				}
			}
			if el := time.Since(start); el < n*period || el > n*period+2*time.Second {
				t.Fatalf("%d waits took %v, want %v and not much more", n, el, n*period)
			}

			// Behind by several periods: one wait returns at once.
			behind := time.Now().Add(5 * period)
			for time.Now().Before(behind) {
			}
			a := time.Now()
			if err := st.wait(); err != nil {
				t.Fatal(err)
			}
			if el := time.Since(a); el > period/2+time.Millisecond {
				t.Errorf("the wait after missed periods took %v, want at once", el)
			}

			// Disarmed, then armed again: a full period from the arm.
			if err := st.arm(0); err != nil {
				t.Fatal(err)
			}
			if err := st.arm(period); err != nil {
				t.Fatal(err)
			}
			a = time.Now()
			if err := st.wait(); err != nil {
				t.Fatal(err)
			}
			if el := time.Since(a); el < period {
				t.Errorf("the first wait after re-arming took %v, want at least %v", el, period)
			}
		})
	}
}
