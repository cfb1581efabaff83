package connector

import (
	"errors"
	"slices"
	"testing"
)

func TestTrackerDoneInOrder(t *testing.T) {
	tr := newTracker()
	var got []string
	done := func(name string) func(error) {
		return func(err error) {
			if err != nil {
				name += "!"
			}
			got = append(got, name)
		}
	}
	a := tr.add(done("a"))
	tr.sent(a)
	tr.sent(a)
	tr.published(a, nil)
	b := tr.add(done("b"))
	tr.sent(b)
	tr.published(b, nil)
	c := tr.add(nil) // a chunk in the middle of a transaction
	tr.sent(c)
	tr.published(c, nil)
	d := tr.add(done("d")) // a commit with nothing left to send
	tr.published(d, nil)

	tr.acked(b, nil) // b before a: must wait for a
	if len(got) != 0 {
		t.Fatalf("done called before the first batch was acknowledged: %v", got)
	}
	tr.acked(a, nil)
	if len(got) != 0 {
		t.Fatalf("a done with one message outstanding: %v", got)
	}
	tr.acked(a, nil)
	if want := []string{"a", "b"}; !slices.Equal(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	tr.acked(c, nil)
	if want := []string{"a", "b", "d"}; !slices.Equal(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	if n := tr.inFlight(); n != 0 {
		t.Fatalf("%d in flight after all acks", n)
	}
}

func TestTrackerFailureFailsLaterBatches(t *testing.T) {
	tr := newTracker()
	var got []error
	rec := func(err error) { got = append(got, err) }
	a := tr.add(rec)
	tr.sent(a)
	tr.published(a, nil)
	b := tr.add(rec)
	tr.sent(b)
	tr.published(b, nil)
	c := tr.add(rec)
	tr.sent(c)
	tr.published(c, nil)

	boom := errors.New("boom")
	tr.acked(c, nil)
	tr.acked(b, boom) // reported at once, before a is done
	select {
	case err := <-tr.failures:
		if err != boom {
			t.Fatalf("failure %v, want boom", err)
		}
	default:
		t.Fatal("failure not reported at once")
	}
	tr.acked(a, nil)
	if len(got) != 3 || got[0] != nil || got[1] != boom || got[2] != boom {
		t.Fatalf("done errors %v; want nil for a, then boom for b and for c, which was acknowledged after a failed batch", got)
	}
}
